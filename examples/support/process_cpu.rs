//! The CPU time a benchmark example's process has used (shared by `overhead`, `stream_ab` and
//! `startup`).
#![allow(dead_code)] // each example uses its own subset

/// CPU time (user + sys, seconds) this process has used so far: `/proc/self/stat` fields 14 and
/// 15, in clock ticks (100 per second on Linux). `None` where there is no procfs.
pub fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), starting at field 3.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .collect();
    let ticks = |field: usize| fields.get(field - 3)?.parse::<f64>().ok();
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

/// CPU time of this process's live threads, milliseconds, at nanosecond resolution (each
/// thread's `schedstat` starts with its time on a CPU): for costs of a few milliseconds, which
/// the 10 ms ticks of [`process_cpu_s`] cannot show. Threads that already exited are not counted.
pub fn live_threads_cpu_ms() -> f64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    let ns: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e6
}

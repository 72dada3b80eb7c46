//! The CPU time a benchmark example's process has used (shared by `overhead` and `stream_ab`).

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

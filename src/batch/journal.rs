//! The job's journal: one SQLite row per finished item (`custom_id`, the fingerprint of its
//! input line, status, error code, cost, the output line), the source of truth for resuming.
//!
//! Order of durability (docs/behaviour.md §13.2): an item's row is committed before its
//! result leaves the runner, so an output line always has its journal row. A run started with a
//! journal rewrites the whole output: journalled items are replayed from their rows, the others
//! are sent. A `kill -9` between the commit and the write of the output line therefore loses
//! nothing (the next run writes the line from the row), and a kill before the commit re-sends
//! only the calls that were in flight. WAL with `synchronous=NORMAL`: a committed row survives
//! the process being killed (not necessarily a power loss).
//!
//! `rusqlite::Connection` is not `Sync`: one thread owns it, fed over a channel; records that
//! arrive together are committed in one transaction (group commit).

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::oneshot;

/// Records committed per transaction at most.
const GROUP_COMMIT: usize = 512;

/// A finished item's row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) custom_id: String,
    /// SHA-256 (hex, 16 characters) of the input line: a journal reused with another input
    /// does not replay a different request's answer.
    pub(crate) fingerprint: String,
    pub(crate) status_code: u16,
    pub(crate) error_code: Option<String>,
    pub(crate) cost: f64,
    pub(crate) line: String,
}

enum Command {
    Lookup(String, oneshot::Sender<Result<Option<Entry>, String>>),
    Record(Entry, oneshot::Sender<Result<(), String>>),
}

/// A handle to the journal's writer thread.
#[derive(Clone)]
pub(crate) struct Journal {
    commands: mpsc::Sender<Command>,
    path: PathBuf,
    /// The journal had no rows when opened: no item was answered by an earlier run, so
    /// `lookup` answers without a round trip to the writer thread (a first run's admission then
    /// never waits behind a group commit).
    fresh: bool,
}

impl Journal {
    /// Open (or create) the journal at `path`; the error names the path.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        let fail = |e: rusqlite::Error| format!("batch journal {}: {e}", path.display());
        let conn = Connection::open(path).map_err(fail)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;
             CREATE TABLE IF NOT EXISTS batch_items (
                 custom_id TEXT PRIMARY KEY,
                 fingerprint TEXT NOT NULL,
                 status_code INTEGER NOT NULL,
                 error_code TEXT,
                 cost REAL NOT NULL,
                 output_line TEXT NOT NULL,
                 finished_at_ms INTEGER NOT NULL
             );",
        )
        .map_err(fail)?;
        let fresh = conn
            .query_row("SELECT NOT EXISTS (SELECT 1 FROM batch_items)", [], |row| {
                row.get::<_, bool>(0)
            })
            .map_err(fail)?;
        let (commands, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("pgw-batch-journal".into())
            .spawn(move || writer(conn, rx))
            .map_err(|e| {
                format!(
                    "batch journal {}: cannot start its writer: {e}",
                    path.display()
                )
            })?;
        Ok(Self {
            commands,
            path: path.to_path_buf(),
            fresh,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The row of `custom_id`, if it finished in an earlier run (rows this run records are not
    /// looked up: the runner never admits a `custom_id` twice).
    pub(crate) async fn lookup(&self, custom_id: &str) -> Result<Option<Entry>, String> {
        if self.fresh {
            return Ok(None);
        }
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Lookup(custom_id.to_string(), tx))
            .map_err(|_| self.gone())?;
        rx.await.map_err(|_| self.gone())?
    }

    /// Commit `entry`; returns once it is durable.
    pub(crate) async fn record(&self, entry: Entry) -> Result<(), String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Record(entry, tx))
            .map_err(|_| self.gone())?;
        rx.await.map_err(|_| self.gone())?
    }

    fn gone(&self) -> String {
        format!("batch journal {}: its writer stopped", self.path.display())
    }
}

fn writer(mut conn: Connection, commands: mpsc::Receiver<Command>) {
    while let Ok(first) = commands.recv() {
        let mut group = vec![first];
        while group.len() < GROUP_COMMIT {
            match commands.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        let mut acks = Vec::new();
        let outcome = (|| -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            for command in group {
                match command {
                    Command::Lookup(id, reply) => {
                        let _ = reply.send(lookup(&tx, &id).map_err(|e| e.to_string()));
                    }
                    Command::Record(entry, ack) => {
                        tx.execute(
                            "INSERT OR REPLACE INTO batch_items (custom_id, fingerprint, \
                             status_code, error_code, cost, output_line, finished_at_ms) \
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                            params![
                                entry.custom_id,
                                entry.fingerprint,
                                entry.status_code,
                                entry.error_code,
                                entry.cost,
                                entry.line,
                                now_ms()
                            ],
                        )?;
                        acks.push(ack);
                    }
                }
            }
            tx.commit()
        })();
        let result = outcome.map_err(|e| format!("batch journal commit failed: {e}"));
        for ack in acks {
            let _ = ack.send(result.clone());
        }
    }
}

fn lookup(conn: &Connection, custom_id: &str) -> rusqlite::Result<Option<Entry>> {
    conn.query_row(
        "SELECT custom_id, fingerprint, status_code, error_code, cost, output_line \
         FROM batch_items WHERE custom_id = ?1",
        [custom_id],
        |row| {
            Ok(Entry {
                custom_id: row.get(0)?,
                fingerprint: row.get(1)?,
                status_code: row.get(2)?,
                error_code: row.get(3)?,
                cost: row.get(4)?,
                line: row.get(5)?,
            })
        },
    )
    .optional()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The fingerprint of an input line (see [`Entry::fingerprint`]).
pub(crate) fn fingerprint(line: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(line.as_bytes()))[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_recorded_item_is_found_by_a_later_journal_on_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.journal");
        let journal = Journal::open(&path).unwrap();
        assert_eq!(journal.lookup("a").await.unwrap(), None);
        let entry = Entry {
            custom_id: "a".into(),
            fingerprint: fingerprint("{}"),
            status_code: 200,
            error_code: None,
            cost: 0.25,
            line: "{\"custom_id\":\"a\"}".into(),
        };
        journal.record(entry.clone()).await.unwrap();
        drop(journal);
        let reopened = Journal::open(&path).unwrap();
        assert_eq!(reopened.lookup("a").await.unwrap(), Some(entry));
    }

    #[tokio::test]
    async fn only_a_journal_with_rows_from_an_earlier_run_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.journal");
        let first = Journal::open(&path).unwrap();
        assert!(first.fresh);
        let entry = Entry {
            custom_id: "a".into(),
            fingerprint: fingerprint("{}"),
            status_code: 200,
            error_code: None,
            cost: 0.0,
            line: "{}".into(),
        };
        first.record(entry.clone()).await.unwrap();
        drop(first);
        let second = Journal::open(&path).unwrap();
        assert!(!second.fresh);
        assert_eq!(second.lookup("a").await.unwrap(), Some(entry));
        assert_eq!(second.lookup("b").await.unwrap(), None);
    }

    #[test]
    fn an_unwritable_path_is_named() {
        let err = Journal::open(Path::new("/nonexistent-dir/x/job.journal"))
            .err()
            .unwrap();
        assert!(err.contains("/nonexistent-dir/x/job.journal"), "{err}");
    }
}

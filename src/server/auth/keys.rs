//! Virtual keys: the bearer keys callers of `polygateway serve` present, stored only as salted
//! SHA-256 hashes (`salt$hash`, hex), compared in constant time, never logged or shown in
//! `Debug`. Each key names its tenant (telemetry `tenant_id`), the scopes it may use and its
//! optional request-rate and concurrency limits. Not the enforcement of those limits: that is
//! [`super::limits`], through the runtime's limiter backend.
//!
//! Every key has a salt of its own, so a presented string can only be checked against a key by
//! hashing it with that key's salt: finding which key it is, among all of them, costs one
//! SHA-256 per configured key. A thousand keys doubled the server's CPU per request that way
//! (`examples/server_bench --keys 1000`). So a string that verified once is remembered by a keyed
//! hash of it (SipHash under a key drawn at start, so nobody outside can aim at an entry): its
//! next request checks that one key (one SHA-256, still compared in constant time) and searches
//! only if that fails. The memory holds a `u64` and an index per key that was used, never the
//! string.
//!
//! A wrong string costs the whole search too, and a client retrying a revoked or mistyped key
//! would pay it on every request (with a thousand keys, 100–150 µs of CPU a refusal). So a string
//! refused once is remembered as refused, by a SHA-256 of it under a salt drawn at start (never
//! the string; 32 bytes, so no two strings share an entry): its next request is refused for that
//! one digest. The set holds at most [`REFUSED_MAX`] entries and is emptied when full, so a stream
//! of distinct wrong strings only empties it, each of them costing what it cost before. The keys
//! never change while the store lives, so a refused string stays wrong.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::sync::RwLock;
use std::time::Duration;

use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::GatewayError;
use crate::types::Priority;

const SALT_BYTES: usize = 16;

/// How many refused strings the store remembers (module docs): 4,096 digests of 32 bytes.
const REFUSED_MAX: usize = 4096;

/// A new random virtual key (`pgw-` and 64 hex digits, 256 bits). Hand it to the caller once and
/// store only [`hash_key`]'s output.
///
/// ```
/// let key = polygateway::server::generate_key();
/// assert!(key.starts_with("pgw-") && key.len() == 68);
/// assert_ne!(key, polygateway::server::generate_key());
/// ```
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("pgw-{}", hex::encode(bytes))
}

/// The stored form of `key`: a fresh random salt and SHA-256 over salt and key, as
/// `salt$hash` in hex. Two calls give two different strings that both verify.
///
/// ```
/// use polygateway::server::{hash_key, KeyStore};
/// let stored = hash_key("pgw-secret");
/// assert_ne!(stored, hash_key("pgw-secret"));
/// let json = format!(r#"{{"keys": [{{"name": "ci", "hash": "{stored}", "scopes": ["*"]}}]}}"#);
/// let keys = KeyStore::from_json(&json).unwrap();
/// assert_eq!(keys.authenticate("pgw-secret").map(|k| k.name()), Some("ci"));
/// assert!(keys.authenticate("pgw-wrong").is_none());
/// ```
pub fn hash_key(key: &str) -> String {
    let mut salt = [0u8; SALT_BYTES];
    rand::rng().fill_bytes(&mut salt);
    format!("{}${}", hex::encode(salt), hex::encode(digest(&salt, key)))
}

fn digest(salt: &[u8], key: &str) -> [u8; 32] {
    #[cfg(test)]
    tests::DIGESTS.with(|n| n.set(n.get() + 1));
    let mut h = Sha256::new();
    h.update(salt);
    h.update(key.as_bytes());
    h.finalize().into()
}

/// One configured virtual key: its name, tenant, allowed scopes and limits. The secret is not
/// here, only its salted hash, and `Debug` shows neither.
///
/// ```
/// use polygateway::server::{hash_key, KeyStore};
/// let json = format!(
///     r#"{{"keys": [{{"name": "team-a", "hash": "{}", "tenant": "acme",
///          "scopes": ["LLM"], "rpm": 60, "max_concurrency": 4}}]}}"#,
///     hash_key("pgw-a")
/// );
/// let keys = KeyStore::from_json(&json).unwrap();
/// let key = keys.authenticate("pgw-a").unwrap();
/// assert_eq!((key.name(), key.tenant()), ("team-a", "acme"));
/// assert_eq!((key.rpm(), key.max_concurrency()), (60, 4));
/// assert!(!format!("{key:?}").contains("hash"));
/// ```
pub struct VirtualKey {
    /// Shared: every request of the key hands it to its call (the dashboard's per-key series).
    name: std::sync::Arc<str>,
    tenant: String,
    scopes: Option<BTreeSet<String>>,
    rpm: u32,
    max_concurrency: u32,
    priority: Priority,
    deadline: Option<Duration>,
    weight: u32,
    budget: Option<crate::config::SpendBudget>,
    /// `"admin"` among its scopes: it may read the dashboard's operator data.
    admin: bool,
    salt: Vec<u8>,
    hash: [u8; 32],
}

impl std::fmt::Debug for VirtualKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualKey")
            .field("name", &self.name)
            .field("tenant", &self.tenant)
            .field("scopes", &self.scopes)
            .field("rpm", &self.rpm)
            .field("max_concurrency", &self.max_concurrency)
            .field("priority", &self.priority)
            .field("deadline", &self.deadline)
            .field("weight", &self.weight)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl VirtualKey {
    /// The key's name (its identity in limits and logs; never the secret).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// # let json = format!(r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"]}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().name(), "ci");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key's name, shared (what a call of the key carries, without copying it).
    pub(crate) fn shared_name(&self) -> std::sync::Arc<str> {
        std::sync::Arc::clone(&self.name)
    }

    /// The tenant recorded in telemetry `tenant_id` (the name when the file gives none).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// # let json = format!(r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"]}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().tenant(), "ci");
    /// ```
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Whether the key may call scope `scope` (`"*"` in the file allows every scope).
    pub(crate) fn may_use(&self, scope: &str) -> bool {
        self.scopes.as_ref().is_none_or(|s| s.contains(scope))
    }

    /// Whether the key's `scopes` include `"admin"`: it may read the status page's operator data
    /// (key and tenant names, spend, budgets, error text; docs/behaviour.md §12.8). `"*"` alone
    /// is not admin.
    pub(crate) fn is_admin(&self) -> bool {
        self.admin
    }

    /// Requests per minute allowed to this key (0 = unlimited).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// # let json = format!(r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"]}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().rpm(), 0);
    /// ```
    pub fn rpm(&self) -> u32 {
        self.rpm
    }

    /// Requests of this key in flight at once (0 = unlimited).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// # let json = format!(r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"], "max_concurrency": 2}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().max_concurrency(), 2);
    /// ```
    pub fn max_concurrency(&self) -> u32 {
        self.max_concurrency
    }

    /// The key's priority class: its calls' default, and the highest an `x-pgw-priority`
    /// header may ask for (docs/behaviour.md §12.2).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// use polygateway::types::Priority;
    /// # let json = format!(r#"{{"keys": [{{"name": "etl", "hash": "{}", "scopes": ["*"], "priority": "batch"}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().priority(), Priority::Batch);
    /// ```
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The deadline of the key's calls when a request sets none (`deadline_s`; `None`: none).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// use std::time::Duration;
    /// # let json = format!(r#"{{"keys": [{{"name": "web", "hash": "{}", "scopes": ["*"], "deadline_s": 5}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().deadline(), Some(Duration::from_secs(5)));
    /// ```
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The key's tenant weight in the fair share among waiting calls (default 1).
    ///
    /// ```
    /// # use polygateway::server::{hash_key, KeyStore};
    /// # let json = format!(r#"{{"keys": [{{"name": "big", "hash": "{}", "scopes": ["*"], "weight": 4}}]}}"#, hash_key("k"));
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("k").unwrap().weight(), 4);
    /// ```
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// The key's spend budget (`"budget": "20/day"` in the key file): its chat calls count
    /// against `vkey:<name>` besides their scope's and tenant's budgets.
    pub(crate) fn budget(&self) -> Option<crate::config::SpendBudget> {
        self.budget
    }

    fn matches(&self, presented: &str) -> subtle::Choice {
        digest(&self.salt, presented).ct_eq(&self.hash)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    hash: String,
    #[serde(default)]
    tenant: Option<String>,
    scopes: Vec<String>,
    #[serde(default)]
    rpm: u32,
    #[serde(default)]
    max_concurrency: u32,
    #[serde(default)]
    priority: Option<String>,
    #[serde(default)]
    deadline_s: Option<f64>,
    #[serde(default)]
    weight: Option<u64>,
    budget: Option<String>,
}

/// The configured virtual keys (`PGW_SERVER_KEYS_FILE`, JSON):
///
/// ```json
/// {"keys": [{"name": "team-a", "hash": "<salt>$<sha256>", "tenant": "acme",
///            "scopes": ["LLM", "EMBED"], "rpm": 600, "max_concurrency": 16,
///            "priority": "normal", "deadline_s": 30, "weight": 2}]}
/// ```
///
/// `tenant` defaults to the name, `rpm` and `max_concurrency` to 0 (unlimited); `scopes: ["*"]`
/// allows every scope. `priority` (`interactive`, `normal` — the default — or `batch`) is the
/// class of the key's calls and the highest a request may ask for; `deadline_s` the deadline of
/// a request that sets none; `weight` (1–1000, default 1) the tenant's share among waiting calls
/// (docs/behaviour.md §5.7). Names are 1–64 characters of `A-Z a-z 0-9 _ . -` and unique.
///
/// ```
/// use polygateway::server::KeyStore;
/// let err = KeyStore::from_json(r#"{"keys": [{"name": "a b", "hash": "00$00", "scopes": []}]}"#)
///     .unwrap_err();
/// assert!(err.to_string().contains("name"), "{err}");
/// ```
pub struct KeyStore {
    keys: Vec<VirtualKey>,
    /// Which key a presented string verified as, by `hint_hasher`'s hash of the string: at most
    /// one entry per key (module docs).
    hints: RwLock<HashMap<u64, usize>>,
    hint_hasher: RandomState,
    /// Strings refused before, by their SHA-256 under `refusal_salt`: at most [`REFUSED_MAX`]
    /// (module docs).
    refused: RwLock<HashSet<[u8; 32]>>,
    refusal_salt: [u8; SALT_BYTES],
}

/// The keys, not the hints or the refused strings' digests (keyed hashes of secrets).
impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStore")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl KeyStore {
    /// Read and check a key file.
    ///
    /// ```
    /// use polygateway::server::{hash_key, KeyStore};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("keys.json");
    /// let json = format!(r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"]}}]}}"#, hash_key("k"));
    /// std::fs::write(&path, json).unwrap();
    /// assert_eq!(KeyStore::from_file(&path).unwrap().len(), 1);
    /// assert!(KeyStore::from_file(dir.path().join("missing.json")).is_err());
    /// ```
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, GatewayError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                "PGW_SERVER_KEYS_FILE {}: cannot read: {e}",
                path.display()
            )))
        })?;
        Self::from_json(&text).map_err(|e| {
            GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                "PGW_SERVER_KEYS_FILE {}: {e}",
                path.display()
            )))
        })
    }

    /// Parse and check the JSON of a key file.
    ///
    /// ```
    /// use polygateway::server::KeyStore;
    /// // A hash that is not `salt$sha256` in hex is refused, without echoing it.
    /// let err = KeyStore::from_json(r#"{"keys": [{"name": "a", "hash": "plain", "scopes": ["*"]}]}"#)
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("key a: hash"), "{err}");
    /// assert!(!err.to_string().contains("plain"));
    /// ```
    pub fn from_json(text: &str) -> Result<Self, GatewayError> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| {
            GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                "not a key file ({e}); expected {{\"keys\": [{{\"name\", \"hash\", \"scopes\", \
                 optional \"tenant\", \"rpm\", \"max_concurrency\", \"priority\", \"deadline_s\", \"weight\", \"budget\"}}]}}"
            )))
        })?;
        let mut names = BTreeSet::new();
        let mut keys = Vec::with_capacity(file.keys.len());
        for entry in file.keys {
            let name = entry.name;
            let valid_name = (1..=64).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
            if !valid_name {
                return Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                    format!("key name {name:?}: 1-64 characters of A-Z a-z 0-9 _ . - are allowed"),
                )));
            }
            if !names.insert(name.clone()) {
                return Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                    format!("key name {name:?} is given twice"),
                )));
            }
            let (salt, hash) = parse_hash(&entry.hash).ok_or_else(|| {
                GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                    "key {name}: hash must be `salt$sha256` in hex, as `polygateway key hash` \
                     prints it"
                )))
            })?;
            let tenant = entry.tenant.unwrap_or_else(|| name.clone());
            crate::validate::validate_tenant_id(&tenant).map_err(|e| {
                GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                    "key {name}: tenant: {e}"
                )))
            })?;
            let priority = match entry.priority.as_deref() {
                None => Priority::Normal,
                Some(p) => crate::validate::parse_priority(p).map_err(|e| {
                    GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                        "key {name}: priority: {e}"
                    )))
                })?,
            };
            let deadline = entry
                .deadline_s
                .map(crate::validate::deadline_from_secs)
                .transpose()
                .map_err(|e| {
                    GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                        "key {name}: deadline_s: {e}"
                    )))
                })?;
            let weight =
                crate::validate::validate_weight(entry.weight.unwrap_or(1)).map_err(|e| {
                    GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                        "key {name}: {e}"
                    )))
                })?;
            let admin = entry.scopes.iter().any(|s| s == "admin");
            let scopes = if entry.scopes.iter().any(|s| s == "*") {
                None
            } else {
                Some(entry.scopes.into_iter().collect())
            };
            let budget = entry
                .budget
                .map(|b| crate::config::SpendBudget::parse(&format!("key {name}: budget"), &b))
                .transpose()
                .map_err(GatewayError::Config)?;
            keys.push(VirtualKey {
                budget,
                admin,
                name: name.into(),
                tenant,
                scopes,
                rpm: entry.rpm,
                max_concurrency: entry.max_concurrency,
                priority,
                deadline,
                weight,
                salt,
                hash,
            });
        }
        let mut refusal_salt = [0u8; SALT_BYTES];
        rand::rng().fill_bytes(&mut refusal_salt);
        Ok(Self {
            keys,
            hints: RwLock::default(),
            hint_hasher: RandomState::new(),
            refused: RwLock::default(),
            refusal_salt,
        })
    }

    /// The key `presented` is, if any. A string that verified before is checked against its key
    /// first, and one refused before is refused again at once (module docs); any other is hashed
    /// with every configured key's salt and compared in constant time, whichever matches, so the
    /// time a wrong key takes says nothing about which key it was near or how much of it was
    /// right.
    ///
    /// ```
    /// use polygateway::server::{hash_key, KeyStore};
    /// let json = format!(
    ///     r#"{{"keys": [{{"name": "a", "hash": "{}", "scopes": ["*"]}}, {{"name": "b", "hash": "{}", "scopes": ["*"]}}]}}"#,
    ///     hash_key("pgw-a"),
    ///     hash_key("pgw-b")
    /// );
    /// let keys = KeyStore::from_json(&json).unwrap();
    /// assert_eq!(keys.authenticate("pgw-b").unwrap().name(), "b");
    /// assert!(keys.authenticate("").is_none());
    /// ```
    pub fn authenticate(&self, presented: &str) -> Option<&VirtualKey> {
        let hint = self.hint_hasher.hash_one(presented);
        let hinted = (self.hints.read().unwrap_or_else(|e| e.into_inner()))
            .get(&hint)
            .copied();
        if let Some(index) = hinted {
            // A hint is only where to look: the key's own hash decides.
            let key = &self.keys[index];
            if bool::from(key.matches(presented)) {
                return Some(key);
            }
        }
        let refusal = digest(&self.refusal_salt, presented);
        if (self.refused.read().unwrap_or_else(|e| e.into_inner())).contains(&refusal) {
            return None;
        }
        let mut found: Option<usize> = None;
        for (index, key) in self.keys.iter().enumerate() {
            if bool::from(key.matches(presented)) {
                found = Some(index);
            }
        }
        let Some(index) = found else {
            let mut refused = self.refused.write().unwrap_or_else(|e| e.into_inner());
            if refused.len() >= REFUSED_MAX {
                refused.clear();
            }
            refused.insert(refusal);
            return None;
        };
        let mut hints = self.hints.write().unwrap_or_else(|e| e.into_inner());
        // One entry per key: a second string verifying as the same key would take a SHA-256
        // collision, and the bound holds even then. An entry that sent this string elsewhere
        // is mended whatever the count.
        if hints.len() < self.keys.len() || hints.contains_key(&hint) {
            hints.insert(hint, index);
        }
        Some(&self.keys[index])
    }

    /// Every key (the status page lists their spend budgets).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &VirtualKey> {
        self.keys.iter()
    }

    /// Number of configured keys.
    ///
    /// ```
    /// let keys = polygateway::server::KeyStore::from_json(r#"{"keys": []}"#).unwrap();
    /// assert_eq!(keys.len(), 0);
    /// assert!(keys.is_empty());
    /// ```
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is configured (then every request is refused with 401).
    ///
    /// ```
    /// let keys = polygateway::server::KeyStore::from_json(r#"{"keys": []}"#).unwrap();
    /// assert!(keys.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn parse_hash(stored: &str) -> Option<(Vec<u8>, [u8; 32])> {
    let (salt, hash) = stored.split_once('$')?;
    let salt = hex::decode(salt).ok().filter(|s| !s.is_empty())?;
    let hash: [u8; 32] = hex::decode(hash).ok()?.try_into().ok()?;
    Some((salt, hash))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// SHA-256 digests taken on this thread: what authenticating cost.
        pub(super) static DIGESTS: Cell<usize> = const { Cell::new(0) };
    }

    fn digests_for(f: impl FnOnce()) -> usize {
        let before = DIGESTS.with(Cell::get);
        f();
        DIGESTS.with(Cell::get) - before
    }

    fn store(n: usize) -> KeyStore {
        let entries: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    r#"{{"name": "k{i}", "hash": "{}", "scopes": ["*"]}}"#,
                    hash_key(&format!("pgw-{i}"))
                )
            })
            .collect();
        KeyStore::from_json(&format!(r#"{{"keys": [{}]}}"#, entries.join(","))).unwrap()
    }

    fn hints(keys: &KeyStore) -> usize {
        keys.hints.read().unwrap().len()
    }

    fn refused(keys: &KeyStore) -> usize {
        keys.refused.read().unwrap().len()
    }

    /// Points `presented`'s hint at the key at `index`, as a collision of the keyed hash would.
    fn point(keys: &KeyStore, presented: &str, index: usize) {
        let hint = keys.hint_hasher.hash_one(presented);
        keys.hints.write().unwrap().insert(hint, index);
    }

    /// A key is searched for once: from its second request on it costs one digest, not one per
    /// configured key (the first costs one more, the look-up among refused strings).
    #[test]
    fn a_key_that_verified_is_checked_alone_the_next_time() {
        let keys = store(50);
        let first = digests_for(|| assert_eq!(keys.authenticate("pgw-31").unwrap().name(), "k31"));
        assert_eq!(first, 1 + 50);
        let again = digests_for(|| assert_eq!(keys.authenticate("pgw-31").unwrap().name(), "k31"));
        assert_eq!(again, 1);
        assert_eq!(hints(&keys), 1);
        assert_eq!(refused(&keys), 0);
    }

    /// A wrong string is searched for once: refused again, it costs one digest, not one per
    /// configured key, and every other wrong string still costs the whole search.
    #[test]
    fn a_string_refused_once_is_refused_at_once_the_next_time() {
        let keys = store(50);
        let first = digests_for(|| assert!(keys.authenticate("pgw-31 ").is_none()));
        assert_eq!(first, 1 + 50);
        for _ in 0..2 {
            let again = digests_for(|| assert!(keys.authenticate("pgw-31 ").is_none()));
            assert_eq!(again, 1);
        }
        let other = digests_for(|| assert!(keys.authenticate("pgw-x").is_none()));
        assert_eq!(other, 1 + 50);
        // The right key still verifies, and is not taken for a refused one.
        assert_eq!(keys.authenticate("pgw-31").unwrap().name(), "k31");
        assert_eq!((hints(&keys), refused(&keys)), (1, 2));
        assert!(!format!("{keys:?}").contains("refus"));
    }

    /// The refused strings never outnumber `REFUSED_MAX`: a full set is emptied, and a string
    /// refused before it was emptied costs the whole search again, no more.
    #[test]
    fn the_refused_strings_are_bounded() {
        let keys = store(2);
        for i in 0..REFUSED_MAX {
            assert!(keys.authenticate(&format!("wrong-{i}")).is_none());
        }
        assert_eq!(refused(&keys), REFUSED_MAX);
        assert_eq!(
            digests_for(|| assert!(keys.authenticate("wrong-0").is_none())),
            1
        );
        assert!(keys.authenticate("one-too-many").is_none());
        assert_eq!(refused(&keys), 1);
        let searched = digests_for(|| assert!(keys.authenticate("wrong-0").is_none()));
        assert_eq!(searched, 1 + 2);
    }

    /// A hint is only where to look first: one that points at another key (a collision of the
    /// keyed hash) costs one digest more and the search still finds the right key, or none.
    #[test]
    fn a_hint_that_does_not_verify_is_only_a_detour() {
        let keys = store(3);
        point(&keys, "pgw-2", 0);
        point(&keys, "pgw-wrong", 1);
        let found = digests_for(|| assert_eq!(keys.authenticate("pgw-2").unwrap().name(), "k2"));
        assert_eq!(found, 1 + 1 + 3);
        assert!(keys.authenticate("pgw-wrong").is_none());
        // The detour is mended: the next request of that key goes straight to it.
        let again = digests_for(|| assert_eq!(keys.authenticate("pgw-2").unwrap().name(), "k2"));
        assert_eq!(again, 1);
    }

    /// The hints never outnumber the keys, even when entries that no key would make fill them;
    /// a full set still mends an entry that points a key's string elsewhere.
    #[test]
    fn the_hints_are_bounded_by_the_keys() {
        let keys = store(2);
        point(&keys, "x", 0);
        point(&keys, "y", 1);
        assert_eq!(keys.authenticate("pgw-0").unwrap().name(), "k0");
        assert_eq!(hints(&keys), 2);
        let x = keys.hint_hasher.hash_one("x");
        keys.hints.write().unwrap().remove(&x);
        point(&keys, "pgw-1", 0);
        let detour = digests_for(|| assert_eq!(keys.authenticate("pgw-1").unwrap().name(), "k1"));
        assert_eq!(detour, 1 + 1 + 2);
        let again = digests_for(|| assert_eq!(keys.authenticate("pgw-1").unwrap().name(), "k1"));
        assert_eq!(again, 1);
        assert_eq!(hints(&keys), 2);
        assert!(!format!("{keys:?}").contains("hints"));
    }

    #[test]
    fn a_stored_hash_verifies_only_its_key() {
        let stored = hash_key("pgw-one");
        let (salt, hash) = parse_hash(&stored).unwrap();
        assert_eq!(salt.len(), SALT_BYTES);
        assert_eq!(digest(&salt, "pgw-one"), hash);
        assert_ne!(digest(&salt, "pgw-one "), hash);
        assert_ne!(digest(&salt, "pgw-on"), hash);
    }

    #[test]
    fn malformed_hashes_are_refused() {
        for bad in ["", "$", "zz$00", "00$", "00$abcd", "nodollar"] {
            assert!(parse_hash(bad).is_none(), "{bad}");
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn virtual_key_may_use_example() {
        use crate::server::{hash_key, KeyStore};
        let json = format!(
            r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"]}}]}}"#,
            hash_key("k")
        );
        let keys = KeyStore::from_json(&json).unwrap();
        assert!(keys.authenticate("k").unwrap().may_use("ANY_SCOPE"));
        // A key listing its scopes may use those only (this was in `VirtualKey`'s example).
        let json = format!(
            r#"{{"keys": [{{"name": "team-a", "hash": "{}", "scopes": ["LLM"]}}]}}"#,
            hash_key("pgw-a")
        );
        let keys = KeyStore::from_json(&json).unwrap();
        let key = keys.authenticate("pgw-a").unwrap();
        assert!(key.may_use("LLM") && !key.may_use("EMBED"));
    }

    #[test]
    fn virtual_key_is_admin_example() {
        use crate::server::{hash_key, KeyStore};
        let json = format!(
            r#"{{"keys": [{{"name": "ops", "hash": "{}", "scopes": ["*", "admin"]}},
                         {{"name": "app", "hash": "{}", "scopes": ["*"]}}]}}"#,
            hash_key("k-ops"),
            hash_key("k-app")
        );
        let keys = KeyStore::from_json(&json).unwrap();
        assert!(keys.authenticate("k-ops").unwrap().is_admin());
        assert!(!keys.authenticate("k-app").unwrap().is_admin());
    }

    #[test]
    fn virtual_key_budget_example() {
        use crate::server::{hash_key, KeyStore};
        let json = format!(
            r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"], "budget": "20/day"}}]}}"#,
            hash_key("k")
        );
        let keys = KeyStore::from_json(&json).unwrap();
        assert_eq!(
            keys.authenticate("k")
                .unwrap()
                .budget()
                .unwrap()
                .to_string(),
            "20/day"
        );
        // A budget that does not parse names the key and what is allowed.
        let bad = json.replace("20/day", "20 dollars");
        let err = KeyStore::from_json(&bad).unwrap_err().to_string();
        assert!(
            err.contains("key ci: budget") && err.contains("hour|day|month"),
            "{err}"
        );
    }
}

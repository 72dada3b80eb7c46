//! Backends the configuration names but this build cannot provide: each optional backend is a
//! cargo feature (`redis`, `sqlite`, `postgres`), and asking for one that is not compiled in is a
//! configuration error naming the key and the feature, never a silent fallback.

use super::{
    CacheSettings, ConfigError, GovernanceBackendKind, Settings, TelemetryBackendSettings,
};

/// Refuses the first backend in `settings` whose feature is off.
pub(crate) fn check(settings: &Settings) -> Result<(), ConfigError> {
    let redis = cfg!(feature = "redis");
    if settings.limiter_backend == GovernanceBackendKind::Redis && !redis {
        return Err(disabled("PGW_LIMITER_BACKEND", "redis", "redis"));
    }
    if settings.breaker_backend == GovernanceBackendKind::Redis && !redis {
        return Err(disabled("PGW_BREAKER_BACKEND", "redis", "redis"));
    }
    if matches!(settings.cache, CacheSettings::Redis { .. }) && !redis {
        return Err(disabled("PGW_CACHE_BACKEND", "redis", "redis"));
    }
    telemetry(&settings.telemetry.backend)
}

/// Refuses a telemetry backend whose feature is off.
pub(crate) fn telemetry(backend: &TelemetryBackendSettings) -> Result<(), ConfigError> {
    match backend {
        TelemetryBackendSettings::Sqlite { .. } if !cfg!(feature = "sqlite") => {
            Err(disabled("PGW_TELEMETRY_BACKEND", "sqlite", "sqlite"))
        }
        TelemetryBackendSettings::Postgres { .. } if !cfg!(feature = "postgres") => {
            Err(disabled("PGW_TELEMETRY_BACKEND", "postgres", "postgres"))
        }
        _ => Ok(()),
    }
}

pub(crate) fn disabled(key: &str, value: &str, feature: &'static str) -> ConfigError {
    ConfigError::FeatureDisabled {
        key: key.to_string(),
        value: value.to_string(),
        feature,
    }
}

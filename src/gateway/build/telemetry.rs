//! Build step: telemetry — the sink (injected, or the one `PGW_TELEMETRY_BACKEND` names), its
//! supervised writer actor and queue, and the pricing table.

use std::sync::Arc;

use polygateway_actors::runtime::Runtime;
use polygateway_actors::telemetry::TelemetryWriter;

use super::super::{Owned, Telemetry};
use super::GatewayBuilder;
use crate::config::keys::global::PGW_PRICING_PATH;
use crate::config::TelemetryBackendSettings;
use crate::error::GatewayError;
use crate::telemetry::{sink_from_settings, Pricing};

/// Rows the telemetry queue holds before counting overflow as dropped.
const TELEMETRY_QUEUE_CAPACITY: usize = 65_536;

impl GatewayBuilder {
    /// The recording side: the sink, its writer (supervised by the runtime, so a restart reuses
    /// the same queue and sink) and the pricing table.
    pub(super) async fn build_telemetry(
        &mut self,
        runtime: &Runtime,
        owned: &mut Owned,
    ) -> Result<Arc<Telemetry>, GatewayError> {
        let settings = &self.settings.telemetry;
        let enabled =
            self.telemetry_sink.is_some() || settings.backend != TelemetryBackendSettings::None;
        let sink = match self.telemetry_sink.take() {
            Some(sink) => sink,
            None => {
                owned.telemetry_sink = true;
                sink_from_settings(settings)
                    .await
                    .map_err(GatewayError::Config)?
            }
        };
        let writer = TelemetryWriter::start(
            runtime,
            sink,
            self.telemetry_config,
            TELEMETRY_QUEUE_CAPACITY,
        )
        .await?;
        Ok(Arc::new(Telemetry {
            writer,
            pricing: self.pricing()?,
            text_cap: settings.text_cap,
            enabled,
        }))
    }

    /// The pricing table `PGW_PRICING_PATH` names, if any.
    fn pricing(&self) -> Result<Option<Arc<Pricing>>, GatewayError> {
        let Some(path) = &self.settings.pricing_path else {
            return Ok(None);
        };
        let pricing = Pricing::load(path).map_err(|e| {
            GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                "{}: {e}",
                PGW_PRICING_PATH.name
            )))
        })?;
        Ok(Some(Arc::new(pricing)))
    }
}

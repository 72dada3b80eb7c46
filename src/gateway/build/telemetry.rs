//! Build step: telemetry — the sink (injected, or the one `PGW_TELEMETRY_BACKEND` names), its
//! supervised writer actor and queue, and the pricing table.

use std::sync::Arc;

use polygateway_actors::runtime::{ActorSlot, Runtime};
use polygateway_actors::telemetry::{TelemetryActor, TelemetryArgs, TelemetryMsg, TelemetryQueue};

use super::super::{Owned, Telemetry};
use super::GatewayBuilder;
use crate::config::keys::global::PGW_PRICING_PATH;
use crate::config::TelemetryBackendSettings;
use crate::error::GatewayError;
use crate::telemetry::row::TelemetryRow;
use crate::telemetry::{sink_from_settings, Pricing};

/// Rows the telemetry queue holds before counting overflow as dropped.
const TELEMETRY_QUEUE_CAPACITY: usize = 65_536;

/// What the gateway keeps of the telemetry step: the recording side, and the writer actor with
/// its arguments (so a restart reuses the same queue and sink).
pub(super) struct TelemetryParts {
    pub(super) telemetry: Arc<Telemetry>,
    pub(super) args: TelemetryArgs<TelemetryRow>,
    pub(super) actor: ActorSlot<TelemetryMsg>,
}

impl GatewayBuilder {
    pub(super) async fn build_telemetry(
        &mut self,
        runtime: &Runtime,
        owned: &mut Owned,
    ) -> Result<TelemetryParts, GatewayError> {
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
        let queue = Arc::new(TelemetryQueue::new(TELEMETRY_QUEUE_CAPACITY));
        let actor = ActorSlot::down("telemetry actor starting");
        let args = TelemetryArgs::new(Arc::clone(&queue), sink, self.telemetry_config);
        runtime
            .adopt(
                "telemetry",
                TelemetryActor::<TelemetryRow>::new,
                args.clone(),
                Some(Default::default()),
                actor.clone(),
            )
            .await
            .map_err(GatewayError::Shutdown)?;
        let telemetry = Arc::new(Telemetry {
            queue,
            pricing: self.pricing()?,
            text_cap: settings.text_cap,
            enabled,
        });
        Ok(TelemetryParts {
            telemetry,
            args,
            actor,
        })
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

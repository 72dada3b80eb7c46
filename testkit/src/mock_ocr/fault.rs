//! The behaviours the mock OCR server can be switched to, and the seeded draw of a fault pool.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the mock OCR server answers. Modes that concern only `/parse` leave `/ocr/text` normal.
///
/// A test of the gateway's defence against a broken layout:
///
/// ```
/// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
/// use polygateway_testkit::mock_settings;
/// use polygateway::GatewayError;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockOcr::start(OcrFault::DegenerateBbox).await;
/// let settings = mock_settings(&[("OCR", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "OCR").await.unwrap();
/// let png = b"\x89PNG\r\n\x1a\n a scanned page".to_vec();
/// let err = gw.parse_layout(png.clone()).await.unwrap_err();
/// assert!(matches!(&err, GatewayError::ResultInvalid { message, .. } if message.contains("zero area")));
/// // `/ocr/text` is not concerned by a layout fault.
/// assert!(gw.recognize_text(png).await.is_ok());
/// # gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OcrFault {
    /// Normal answers: the sample text, the sample three-page layout ZIP.
    None,
    /// Not a fault: a blank page — `/ocr/text` answers `content: ""`, `/parse` a page without
    /// blocks.
    BlankPage,
    /// HTTP 200 with `success: false` and an `OCR task failed: …` / `Parsing failed: …` message.
    SuccessFalse,
    /// HTTP 500 `{"detail": "… failed: CUDA out of memory"}`.
    Detail500,
    /// `/parse` succeeds but the ZIP has no `*_middle.json`.
    MissingMiddleJson,
    /// `/parse` succeeds but the ZIP bytes are not a readable archive.
    CorruptZip,
    /// `/parse` succeeds but page 1 block 1 has a zero-width bbox.
    DegenerateBbox,
    /// Every endpoint (health included) answers normally after this delay.
    Slow(Duration),
    /// Every endpoint (health included) accepts the request and never answers.
    BlackHole,
    /// `/parse` succeeds but its `download_url` answers 404.
    Download404,
    /// HTTP 429 with `Retry-After: 1`.
    RateLimited429,
    /// Each `/ocr/text` or `/parse` request fails with probability `failure_rate`, with a fault
    /// drawn uniformly from `faults`; a seeded generator makes a soak reproducible. Nested `Mix`
    /// entries count as `None`. Health and downloads are not drawn.
    Mix {
        /// Probability in `[0, 1]` that a request gets a fault.
        failure_rate: f64,
        /// The fault pool.
        faults: Vec<OcrFault>,
        /// Generator seed (reset by every `set_mode`).
        seed: u64,
    },
}

/// The current mode with its generator.
#[derive(Debug)]
pub(super) struct ModeState {
    mode: OcrFault,
    rng: StdRng,
}

impl ModeState {
    pub(super) fn new(mode: OcrFault) -> Self {
        let seed = match &mode {
            OcrFault::Mix { seed, .. } => *seed,
            _ => 0,
        };
        Self {
            mode,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// The configured mode (a `Mix` stays a `Mix`).
    pub(super) fn mode(&self) -> &OcrFault {
        &self.mode
    }

    /// The behaviour of one request: the mode itself, or a draw from a `Mix` pool.
    pub(super) fn draw(&mut self) -> OcrFault {
        match &self.mode {
            OcrFault::Mix {
                failure_rate,
                faults,
                ..
            } => {
                if faults.is_empty() || self.rng.random::<f64>() >= *failure_rate {
                    return OcrFault::None;
                }
                match &faults[self.rng.random_range(0..faults.len())] {
                    OcrFault::Mix { .. } => OcrFault::None,
                    fault => fault.clone(),
                }
            }
            mode => mode.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(mode: OcrFault, n: usize) -> Vec<OcrFault> {
        let mut state = ModeState::new(mode);
        (0..n).map(|_| state.draw()).collect()
    }

    #[test]
    fn plain_modes_are_returned_as_is() {
        assert_eq!(draws(OcrFault::Detail500, 3), vec![OcrFault::Detail500; 3]);
    }

    #[test]
    fn mix_is_seeded_and_honours_the_rate() {
        let mix = |seed| OcrFault::Mix {
            failure_rate: 0.3,
            faults: vec![OcrFault::Detail500, OcrFault::CorruptZip],
            seed,
        };
        let a = draws(mix(7), 2000);
        assert_eq!(a, draws(mix(7), 2000));
        assert_ne!(a, draws(mix(8), 2000));
        let faulty = a.iter().filter(|f| **f != OcrFault::None).count();
        assert!((500..700).contains(&faulty), "{faulty} faults of 2000");
        assert!(a.contains(&OcrFault::Detail500) && a.contains(&OcrFault::CorruptZip));
    }

    #[test]
    fn mix_edges() {
        let never = OcrFault::Mix {
            failure_rate: 0.0,
            faults: vec![OcrFault::Detail500],
            seed: 1,
        };
        assert!(draws(never, 100).iter().all(|f| *f == OcrFault::None));
        let nested = OcrFault::Mix {
            failure_rate: 1.0,
            faults: vec![OcrFault::Mix {
                failure_rate: 1.0,
                faults: vec![OcrFault::Detail500],
                seed: 0,
            }],
            seed: 1,
        };
        assert!(draws(nested, 10).iter().all(|f| *f == OcrFault::None));
    }
}

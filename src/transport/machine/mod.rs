//! One chat attempt's exchange as a sans-I/O state machine per dialect (issue #50, quinn-proto's
//! model): the answer's bytes and `now` in; deltas, the deadline in force and a verdict out. No
//! I/O, no tokio; `transport::drive` runs every dialect's machine over reqwest.
//!
//! - `chat_exchange`: [`ChatExchange`], what every dialect shares (stall clock, SSE framing,
//!   assembly, a continuation's trim, the answer), and [`WireDialect`], what differs;
//! - `openai`, `anthropic`, `gemini`: one dialect each — how its events and whole answers
//!   decode, how its end of stream is judged — with the machine's virtual-time tests.

mod anthropic;
mod chat_exchange;
mod gemini;
mod openai;

pub(crate) use anthropic::AnthropicMessages;
pub(crate) use chat_exchange::{BodyEnd, ChatExchange, WireDialect};
pub(crate) use gemini::GeminiContent;
pub(crate) use openai::OpenAiChat;

//! The wire dialects of chat sources behind the one chat transport (docs/behaviour.md §7.5).
//!
//! `transport::chat::ChatTransport` owns the request and the dispatch, `transport::machine` a
//! dialect's sans-I/O exchange (decoding, assembly, deadlines, end-of-stream verdicts) and
//! `transport::drive` the HTTP loop every exchange runs in; a dialect here owns what differs
//! between APIs in codecs: the endpoint and its credentials, the request body built from the
//! canonical call, the answer and its streamed events turned into the assembly's frames, and
//! the rate-limit headers. OpenAI's codec is `transport::wire` (the canonical model is its
//! superset); the others live here, one module each. A dialect is chosen once per source
//! ([`crate::provider::Dialect`]).

pub(crate) mod anthropic;
pub(crate) mod gemini;

use crate::provider::Dialect;
use crate::transport::http::AnswerReader;

/// How `dialect`'s answers are read besides their body: its rate-limit headers and its error
/// bodies.
pub(crate) fn answer_reader(dialect: Dialect) -> AnswerReader {
    match dialect {
        Dialect::Anthropic => AnswerReader {
            rate_limit: anthropic::rate_limit,
            ..AnswerReader::OPENAI
        },
        Dialect::Gemini => gemini::READER,
        Dialect::OpenAi => AnswerReader::OPENAI,
    }
}

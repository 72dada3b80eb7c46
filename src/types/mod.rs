//! Public value types: messages, tools, responses, usage.

pub(crate) mod budget;
pub(crate) mod dialect;
mod embedding;
mod message;
mod meta;
pub(crate) mod native_body;
mod ocr;
mod options;
pub(crate) mod response;
mod thinking;
mod tool;

pub use budget::BudgetStatus;
pub use embedding::EmbeddingResponse;
pub use message::{Content, ContentPart, ImageUrl, Message, Role};
pub use meta::MetaValue;
pub use ocr::{OcrLayoutElement, OcrLayoutResult, OcrProvenance, OcrTextResult};
pub use options::*;
pub use response::{Choice, LlmResponse, Usage, UsageSource};
pub use thinking::ThinkingBlock;
pub use tool::{FunctionCall, Tool, ToolCall, ToolCallDelta, ToolChoice};

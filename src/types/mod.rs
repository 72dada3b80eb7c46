//! Public value types: messages, tools, responses, usage.

pub mod budget;
pub(crate) mod dialect;
pub mod embedding;
pub mod message;
mod meta;
pub(crate) mod native_body;
pub mod ocr;
pub mod options;
pub mod response;
pub mod thinking;
pub mod tool;

pub use budget::BudgetStatus;
pub use embedding::EmbeddingResponse;
pub use message::{Content, ContentPart, ImageUrl, Message, Role};
pub use meta::MetaValue;
pub use ocr::{OcrLayoutElement, OcrLayoutResult, OcrProvenance, OcrTextResult};
pub use options::*;
pub use response::{Choice, LlmResponse, Usage, UsageSource};
pub use thinking::ThinkingBlock;
pub use tool::{FunctionCall, Tool, ToolCall, ToolCallDelta, ToolChoice};

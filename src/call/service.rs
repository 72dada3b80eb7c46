//! [`Service`]: what a layer of the call stack is to the layer above it (tower's `Service`, minus
//! readiness: back-pressure is the runtime's waiting room, below the stack).

use std::future::Future;

use crate::error::GatewayError;

/// Answers one request of kind `Req`. Each layer is a `Service` that holds the layer below it and
/// hands it the request (or, for the structured ladder, one request per ask); the request's type
/// picks the path, so a plain call never carries a ladder's or a stream's state in its future.
pub(crate) trait Service<Req> {
    /// What the layer answers.
    type Response;

    /// Serve `request`.
    fn call(
        &self,
        request: Req,
    ) -> impl Future<Output = Result<Self::Response, GatewayError>> + Send;
}

//! Device profiles with the hosts that could serve each, and the explainer.
//! WORK IN PROGRESS: both pages answer 501 until the candidate-query refactor lands.

use super::Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

pub(crate) async fn profiles(state: Shared, headers: HeaderMap) -> Response {
    if let Err(r) = state.0.who(&headers).await {
        return r;
    }
    super::error(StatusCode::NOT_IMPLEMENTED, "Not built yet.")
}

pub(crate) async fn explain(state: Shared, headers: HeaderMap) -> Response {
    if let Err(r) = state.0.who(&headers).await {
        return r;
    }
    super::error(StatusCode::NOT_IMPLEMENTED, "Not built yet.")
}

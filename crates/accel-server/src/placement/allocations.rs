//! Not yet implemented.

use super::error::{ApiError, ApiResult};
use super::{Reply, Req};
use crate::AppState;
use std::sync::Arc;

pub async fn for_provider(_app: Arc<AppState>, _req: Req) -> ApiResult<Reply> {
    Err(ApiError::internal("not implemented"))
}

pub async fn post_many(_app: Arc<AppState>, _req: Req) -> ApiResult<Reply> {
    Err(ApiError::internal("not implemented"))
}

pub async fn for_consumer(_app: Arc<AppState>, _req: Req) -> ApiResult<Reply> {
    Err(ApiError::internal("not implemented"))
}

pub async fn put_consumer(_app: Arc<AppState>, _req: Req) -> ApiResult<Reply> {
    Err(ApiError::internal("not implemented"))
}

pub async fn delete_consumer(_app: Arc<AppState>, _req: Req) -> ApiResult<Reply> {
    Err(ApiError::internal("not implemented"))
}

//! Not yet implemented.

use super::error::{ApiError, ApiResult};
use super::{Reply, Req};
use crate::AppState;
use std::sync::Arc;

pub async fn reshape(_app: Arc<AppState>, _req: Req) -> ApiResult<Reply> {
    Err(ApiError::internal("not implemented"))
}

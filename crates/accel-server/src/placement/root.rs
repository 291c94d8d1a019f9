//! `GET /`: the version document (no auth needed).

use super::error::ApiResult;
use super::microversion::Version;
use super::AppState;
use super::{Reply, Req};
use accel_api::placement::{mv, Link, VersionDoc, Versions};
use std::sync::Arc;

pub async fn home(_app: Arc<AppState>, req: Req) -> ApiResult<Reply> {
    let body = Versions {
        versions: vec![VersionDoc {
            id: format!("v{}", Version::MIN),
            max_version: Version::MAX.to_string(),
            min_version: Version::MIN.to_string(),
            status: "CURRENT".into(),
            links: vec![Link {
                rel: "self".into(),
                href: String::new(),
            }],
        }],
    };
    let reply = Reply::typed(&body)?;
    Ok(if req.mv(mv::LAST_MODIFIED) {
        reply.modified_now()
    } else {
        reply
    })
}

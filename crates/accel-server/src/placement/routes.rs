//! The Placement route table: path, method, first microversion, content rules.

use super::error::{ApiError, ApiResult};
use super::microversion::Version;
use super::request::{accepts_json, content_type, Req};
use super::{
    aggregates, allocation_candidates, allocations, inventories, reshaper, resource_classes,
    resource_providers, root, traits, usages,
};
use accel_api::placement::mv;
use axum::http::{Method, StatusCode};
use futures::future::FutureExt;

pub type Handler = crate::front::Handler<super::Placement>;

/// What upstream checks about the request's media types before the handler runs.
#[derive(Clone, Copy)]
pub enum Content {
    /// Nothing.
    Any,
    /// `Accept` must admit JSON (406 otherwise).
    Accept,
    /// The body must be `application/json` (415 otherwise).
    Json,
}

pub struct MethodRoute {
    pub method: Method,
    pub min: Version,
    /// Status when the requested version is older than `min`.
    pub too_old: StatusCode,
    pub content: Content,
    pub handler: Handler,
}

impl MethodRoute {
    pub fn check_content(&self, req: &Req) -> ApiResult<()> {
        match self.content {
            Content::Any => Ok(()),
            Content::Accept => {
                if accepts_json(&req.headers) {
                    Ok(())
                } else {
                    Err(ApiError::new(
                        StatusCode::NOT_ACCEPTABLE,
                        "Only application/json is provided",
                    ))
                }
            }
            Content::Json => {
                let ct = content_type(&req.headers);
                if ct == "application/json" {
                    Ok(())
                } else {
                    let shown = if ct.is_empty() { "None".to_owned() } else { ct };
                    Err(ApiError::new(
                        StatusCode::UNSUPPORTED_MEDIA_TYPE,
                        format!("The media type {shown} is not supported, use application/json"),
                    ))
                }
            }
        }
    }
}

macro_rules! h {
    ($f:path) => {
        |app, req| $f(app, req).boxed()
    };
}

fn m(method: Method, min: Version, content: Content, handler: Handler) -> MethodRoute {
    MethodRoute {
        method,
        min,
        too_old: StatusCode::NOT_FOUND,
        content,
        handler,
    }
}

use Content::{Accept, Any, Json};

/// Path segments: literal or a parameter.
#[derive(Clone, Copy)]
enum Seg {
    Lit(&'static str),
    Param,
}
use Seg::{Lit, Param};

fn table() -> Vec<(Vec<Seg>, Vec<MethodRoute>)> {
    let get = Method::GET;
    let put = Method::PUT;
    let post = Method::POST;
    let del = Method::DELETE;
    vec![
        (
            vec![],
            vec![m(get.clone(), Version::MIN, Any, h!(root::home))],
        ),
        (
            vec![Lit("resource_classes")],
            vec![
                m(
                    get.clone(),
                    mv::RESOURCE_CLASSES,
                    Accept,
                    h!(resource_classes::list),
                ),
                m(
                    post.clone(),
                    mv::RESOURCE_CLASSES,
                    Json,
                    h!(resource_classes::create),
                ),
            ],
        ),
        (
            vec![Lit("resource_classes"), Param],
            vec![
                m(
                    get.clone(),
                    mv::RESOURCE_CLASSES,
                    Accept,
                    h!(resource_classes::show),
                ),
                m(
                    put.clone(),
                    mv::RESOURCE_CLASSES,
                    Any,
                    h!(resource_classes::update),
                ),
                m(
                    del.clone(),
                    mv::RESOURCE_CLASSES,
                    Any,
                    h!(resource_classes::delete),
                ),
            ],
        ),
        (
            vec![Lit("resource_providers")],
            vec![
                m(
                    get.clone(),
                    Version::MIN,
                    Accept,
                    h!(resource_providers::list),
                ),
                m(
                    post.clone(),
                    Version::MIN,
                    Json,
                    h!(resource_providers::create),
                ),
            ],
        ),
        (
            vec![Lit("resource_providers"), Param],
            vec![
                m(
                    get.clone(),
                    Version::MIN,
                    Accept,
                    h!(resource_providers::show),
                ),
                m(
                    del.clone(),
                    Version::MIN,
                    Any,
                    h!(resource_providers::delete),
                ),
                m(
                    put.clone(),
                    Version::MIN,
                    Json,
                    h!(resource_providers::update),
                ),
            ],
        ),
        (
            vec![Lit("resource_providers"), Param, Lit("inventories")],
            vec![
                m(get.clone(), Version::MIN, Accept, h!(inventories::list)),
                m(post.clone(), Version::MIN, Json, h!(inventories::create)),
                m(
                    put.clone(),
                    Version::MIN,
                    Json,
                    h!(inventories::replace_all),
                ),
                MethodRoute {
                    too_old: StatusCode::METHOD_NOT_ALLOWED,
                    ..m(
                        del.clone(),
                        mv::DELETE_ALL_INVENTORIES,
                        Any,
                        h!(inventories::delete_all),
                    )
                },
            ],
        ),
        (
            vec![Lit("resource_providers"), Param, Lit("inventories"), Param],
            vec![
                m(get.clone(), Version::MIN, Accept, h!(inventories::show)),
                m(put.clone(), Version::MIN, Json, h!(inventories::update)),
                m(del.clone(), Version::MIN, Any, h!(inventories::delete)),
            ],
        ),
        (
            vec![Lit("resource_providers"), Param, Lit("usages")],
            vec![m(
                get.clone(),
                Version::MIN,
                Accept,
                h!(usages::for_provider),
            )],
        ),
        (
            vec![Lit("resource_providers"), Param, Lit("aggregates")],
            vec![
                m(
                    get.clone(),
                    mv::PROVIDER_AGGREGATES,
                    Accept,
                    h!(aggregates::show),
                ),
                m(
                    put.clone(),
                    mv::PROVIDER_AGGREGATES,
                    Json,
                    h!(aggregates::update),
                ),
            ],
        ),
        (
            vec![Lit("resource_providers"), Param, Lit("allocations")],
            vec![m(
                get.clone(),
                Version::MIN,
                Accept,
                h!(allocations::for_provider),
            )],
        ),
        (
            vec![Lit("allocations")],
            vec![m(
                post.clone(),
                mv::POST_ALLOCATIONS,
                Json,
                h!(allocations::post_many),
            )],
        ),
        (
            vec![Lit("allocations"), Param],
            vec![
                m(
                    get.clone(),
                    Version::MIN,
                    Accept,
                    h!(allocations::for_consumer),
                ),
                m(
                    put.clone(),
                    Version::MIN,
                    Json,
                    h!(allocations::put_consumer),
                ),
                m(
                    del.clone(),
                    Version::MIN,
                    Any,
                    h!(allocations::delete_consumer),
                ),
            ],
        ),
        (
            vec![Lit("allocation_candidates")],
            vec![m(
                get.clone(),
                mv::ALLOCATION_CANDIDATES,
                Accept,
                h!(allocation_candidates::list),
            )],
        ),
        (
            vec![Lit("traits")],
            vec![m(get.clone(), mv::TRAITS, Accept, h!(traits::list))],
        ),
        (
            vec![Lit("traits"), Param],
            vec![
                m(get.clone(), mv::TRAITS, Any, h!(traits::show)),
                m(put.clone(), mv::TRAITS, Any, h!(traits::create)),
                m(del.clone(), mv::TRAITS, Any, h!(traits::delete)),
            ],
        ),
        (
            vec![Lit("resource_providers"), Param, Lit("traits")],
            vec![
                m(get.clone(), mv::TRAITS, Accept, h!(traits::for_provider)),
                m(put.clone(), mv::TRAITS, Json, h!(traits::set_for_provider)),
                m(
                    del.clone(),
                    mv::TRAITS,
                    Any,
                    h!(traits::delete_for_provider),
                ),
            ],
        ),
        (
            vec![Lit("usages")],
            vec![m(
                get.clone(),
                mv::PROJECT_USAGES,
                Accept,
                h!(usages::totals),
            )],
        ),
        (
            vec![Lit("reshaper")],
            vec![m(post.clone(), mv::RESHAPER, Json, h!(reshaper::reshape))],
        ),
    ]
}

fn routes() -> &'static [(Vec<Seg>, Vec<MethodRoute>)] {
    static ROUTES: std::sync::OnceLock<Vec<(Vec<Seg>, Vec<MethodRoute>)>> =
        std::sync::OnceLock::new();
    ROUTES.get_or_init(table)
}

fn decode(seg: &str) -> String {
    percent_decode(seg)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds the route for `path` and `method` at `version`, with its path parameters.
pub fn resolve(
    path: &str,
    method: &Method,
    version: Version,
) -> ApiResult<(&'static MethodRoute, Vec<String>)> {
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    let segs: Vec<&str> = if trimmed.is_empty() {
        vec![]
    } else {
        trimmed.split('/').collect()
    };
    for (pattern, methods) in routes() {
        if pattern.len() != segs.len() {
            continue;
        }
        let mut params = Vec::new();
        let ok = pattern.iter().zip(&segs).all(|(p, s)| match p {
            Lit(l) => l == s,
            Param => {
                if s.is_empty() {
                    return false;
                }
                params.push(decode(s));
                true
            }
        });
        if !ok {
            continue;
        }
        let Some(route) = methods.iter().find(|r| r.method == *method) else {
            let allow = methods
                .iter()
                .map(|r| r.method.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            let mut e = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("The method {method} is not allowed for this resource."),
            );
            e.headers.push(("allow", allow));
            return Err(e);
        };
        if version < route.min {
            if route.too_old == StatusCode::METHOD_NOT_ALLOWED {
                let mut e = ApiError::new(
                    route.too_old,
                    format!("The method {method} is not allowed for this resource."),
                );
                e.version_gated = true;
                return Err(e);
            }
            return Err(ApiError::new(route.too_old, ""));
        }
        return Ok((route, params));
    }
    // Upstream's dispatcher raises this one above the handlers: no `Vary`.
    Err(ApiError::not_found("").without_vary())
}

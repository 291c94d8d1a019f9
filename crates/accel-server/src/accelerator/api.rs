//! The accelerator API behind the front door ([`crate::front`]): Cyborg's WSGI pipeline,
//! in its order, as the door's hooks.
//!
//! ```text
//! path ─▶ strip "/accelerator" (DevStack mount) ─▶ "/" public root document
//!      ─▶ strip "v2" (Pecan prepends it when absent) ─▶ "/v2" public version document
//!      ─▶ auth (401, keystonemiddleware's body) ─▶ microversion (406 + min/max headers)
//!      ─▶ query length, body ─▶ route table ([`route`]: 404 / 405) ─▶ handler
//! ```
//!
//! Every `/v2` answer past authentication carries `OpenStack-API-Minimum-Version`,
//! `-Maximum-Version`, `Vary` and, once the version parsed, `OpenStack-API-Version:
//! accelerator 2.x`; `/` and a 401 carry none.

use super::error::{self, AccelError, Bare};
use super::microversion::{self, Version};
use super::webob::{self, Page};
use super::{agent, arqs, claims, cleaning, hardware, kubernetes, maintenance, profiles, render};
use super::{json_reply, AccelResult, AccelState, Caller, Req};
use crate::auth::{Credentials, Rejection};
use crate::front::{Api, Handler, Head, Reply};
use crate::state::Shared;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode};
use futures::future::FutureExt;
use std::ops::ControlFlow;
use std::sync::Arc;

/// The accelerator API, as the front door knows it.
pub struct Cyborg;

/// A resolved route: its handler, and whether its body goes through WSME's media types.
pub struct Routed {
    handler: Handler<Cyborg>,
    wsme: bool,
}

/// A `/v2` path, split, and the `scheme://host` its links are made of.
pub struct Target {
    segs: Vec<String>,
    host_url: String,
}

impl Api for Cyborg {
    type State = AccelState;
    type Version = Version;
    /// The 406's message.
    type VersionError = String;
    type Error = AccelError;
    type Target = Target;
    type Route = Routed;
    type Local = Caller;

    const NAME: &'static str = "accelerator";
    const REQUEST_ID_HEADERS: &'static [&'static str] = &["x-openstack-request-id"];
    const ROUTE_BEFORE_BODY: bool = false;

    fn shared(st: &AccelState) -> &Shared {
        &st.app
    }

    fn enter(head: &Head) -> ControlFlow<Response<Body>, Target> {
        // WSGI servers hand Pecan PATH_INFO percent-decoded: `dp%2Dx` is `dp-x` and
        // `a%2Cb` is `a,b` before routing, and a `%2F` splits a segment.
        let decoded =
            percent_encoding::percent_decode_str(head.parts.uri.path()).decode_utf8_lossy();
        let mut path: &str = &decoded;
        if let Some(rest) = path.strip_prefix("/accelerator") {
            if rest.is_empty() || rest.starts_with('/') {
                path = rest;
            }
        }
        let path = path.trim_end_matches('/');
        let path = path.strip_suffix(".json").unwrap_or(path);
        let mut segs: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let host_url = host_url(&head.parts.headers);
        if segs.is_empty() {
            return ControlFlow::Break(if head.parts.method == Method::GET {
                json_reply(StatusCode::OK, &render::root_document(&host_url)).into_response(false)
            } else {
                AccelError::page(Page::MethodNotAllowed {
                    method: head.parts.method.to_string(),
                })
                .with_allow("GET".into())
                .into_response_for(&head.parts.headers)
            });
        }
        if segs[0] == "v2" {
            segs.remove(0);
        }
        ControlFlow::Continue(Target { segs, host_url })
    }

    /// The `/v2` version document.
    fn public(target: &Target) -> bool {
        target.segs.is_empty()
    }

    /// The switch itself stays writable.
    fn open_in_maintenance(target: &Target) -> bool {
        target.segs == ["maintenance"]
    }

    /// keystonemiddleware's 401 sits outside Cyborg's app: its own body, no envelope,
    /// no version headers.
    fn rejection(r: &Rejection, _: &Head) -> Response<Body> {
        error::rejection(r)
    }

    fn version<'a>(values: impl Iterator<Item = &'a str>) -> Result<Version, String> {
        microversion::parse(values)
    }

    /// Cyborg's version check raises webob's 406, a page. A version out of range is
    /// answered with the minimum and maximum (the door's stamp); a header that does not
    /// parse, before the range is known, with no version headers at all.
    fn version_refused(message: String, head: &Head) -> Response<Body> {
        let unparsed = message.starts_with("Invalid value");
        let mut resp = AccelError::page(Page::NotAcceptable { detail: message })
            .into_response_for(&head.parts.headers);
        if !unparsed {
            resp.extensions_mut().remove::<Bare>();
        }
        resp
    }

    /// Pecan refuses an `Accept` without JSON before routing.
    fn precheck(head: &Head) -> AccelResult<()> {
        Ok(webob::acceptable(head)?)
    }

    fn error(status: StatusCode, message: String) -> AccelError {
        AccelError::new(status, message)
    }

    fn route(target: &Target, method: &Method, _: Version) -> AccelResult<(Routed, Vec<String>)> {
        let segs: Vec<&str> = target.segs.iter().map(String::as_str).collect();
        let (handler, params) = route(&segs, method)?;
        // Cyborg's own resources read bodies through WSME's media-type switch; accel's
        // agent and Kubernetes paths are read as JSON whatever the type.
        let wsme = !matches!(segs.first(), Some(&("agent" | "device_cleanings")));
        Ok((Routed { handler, wsme }, params))
    }

    fn handler(route: &Routed) -> Handler<Cyborg> {
        route.handler
    }

    fn check(route: &Routed, req: &Req) -> AccelResult<()> {
        match route.wsme {
            true => Ok(webob::body_media_type(
                &req.method,
                &req.headers,
                &req.body,
            )?),
            false => Ok(()),
        }
    }

    fn local(st: &AccelState, target: Target, creds: &Credentials) -> Caller {
        Caller {
            is_admin: creds.policy.roles.iter().any(|r| r == "admin"),
            is_service: st.app.config.is_service(creds),
            host_url: target.host_url,
        }
    }

    fn reply(reply: Reply, _: Version, _: &Head) -> Response<Body> {
        reply.into_response(false)
    }

    fn refusal(e: AccelError, _: Version, head: &Head) -> Response<Body> {
        e.into_response_for(&head.parts.headers)
    }

    fn stamp(resp: &mut Response<Body>, version: Option<Version>, _vary: bool) {
        if resp.extensions().get::<Bare>().is_some() {
            return;
        }
        let h = resp.headers_mut();
        if let Some(version) = version {
            if let Ok(v) = HeaderValue::from_str(&format!("accelerator {version}")) {
                h.insert("openstack-api-version", v);
            }
        }
        h.insert(
            "openstack-api-minimum-version",
            HeaderValue::from_static("2.0"),
        );
        h.insert(
            "openstack-api-maximum-version",
            HeaderValue::from_static("2.3"),
        );
        h.insert("vary", HeaderValue::from_static("OpenStack-API-Version"));
    }
}

/// `scheme://host` for links, as Pecan's `host_url`.
fn host_url(headers: &HeaderMap) -> String {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let scheme = h("x-forwarded-proto").unwrap_or("http");
    let host = h("x-forwarded-host")
        .or_else(|| h("host"))
        .unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// `GET /v2`: the version document.
async fn v2_document(_: Arc<AccelState>, req: Req) -> AccelResult<Reply> {
    Ok(json_reply(
        StatusCode::OK,
        &render::v2_document(req.host_url()),
    ))
}

macro_rules! h {
    ($f:path) => {
        (|st, req| $f(st, req).boxed()) as Handler<Cyborg>
    };
}

/// The route table: one `match` on path segments and method, to the handler and its
/// path parameters; a path served with other methods is a 405 naming them.
fn route(segs: &[&str], method: &Method) -> AccelResult<(Handler<Cyborg>, Vec<String>)> {
    use Method as M;
    let m = method.clone();
    // Pecan's answers: a method the controller lacks is a 405 naming the controller's
    // methods, except a PATCH on a collection without one, and a GET of a custom
    // action, which are 404s.
    let refuse = |allowed: &[Method]| {
        let allow: Vec<&str> = allowed.iter().map(Method::as_str).collect();
        Err(AccelError::page(Page::MethodNotAllowed {
            method: method.to_string(),
        })
        .with_allow(allow.join(", ")))
    };
    let not_found = || Err(AccelError::page(Page::NotFound));
    let collection = |allowed: &[Method]| match m {
        M::PATCH => not_found(),
        _ => refuse(allowed),
    };
    let custom = |allowed: &[Method]| match m {
        M::GET => not_found(),
        _ => refuse(allowed),
    };
    let (dp, arq, hw) = (
        [M::DELETE, M::GET, M::POST],
        [M::DELETE, M::GET, M::PATCH, M::POST],
        [M::GET],
    );
    let (handler, params): (Handler<Cyborg>, Vec<&str>) = match *segs {
        [] => match m {
            M::GET => (h!(v2_document), vec![]),
            _ => return refuse(&[M::GET]),
        },
        ["device_profiles"] => match m {
            M::GET => (h!(profiles::list), vec![]),
            M::POST => (h!(profiles::create), vec![]),
            M::DELETE => (h!(profiles::delete), vec![]),
            _ => return collection(&dp),
        },
        ["device_profiles", id] => match m {
            M::GET => (h!(profiles::show), vec![id]),
            M::DELETE => (h!(profiles::delete), vec![id]),
            _ => return refuse(&dp),
        },
        ["accelerator_requests"] => match m {
            M::GET => (h!(arqs::list), vec![]),
            M::POST => (h!(arqs::create), vec![]),
            M::PATCH => (h!(arqs::patch), vec![]),
            M::DELETE => (h!(arqs::delete), vec![]),
            _ => return refuse(&arq),
        },
        ["accelerator_requests", id] => match m {
            M::GET => (h!(arqs::show), vec![id]),
            M::PATCH => (h!(arqs::patch), vec![id]),
            M::DELETE => (h!(arqs::delete), vec![id]),
            _ => return refuse(&arq),
        },
        ["devices"] => match m {
            M::GET => (h!(hardware::list_devices), vec![]),
            _ => return collection(&hw),
        },
        ["devices", id] => match m {
            M::GET => (h!(hardware::show_device), vec![id]),
            _ => return refuse(&[M::GET]),
        },
        ["devices", id, action @ ("enable" | "disable")] => match m {
            M::POST => (h!(hardware::set_device_status), vec![id, action]),
            _ => return custom(&hw),
        },
        ["deployables"] => match m {
            M::GET => (h!(hardware::list_deployables), vec![]),
            _ => return collection(&hw),
        },
        ["deployables", id] => match m {
            M::GET => (h!(hardware::show_deployable), vec![id]),
            _ => return refuse(&[M::GET]),
        },
        ["deployables", id, "program"] => match m {
            M::PATCH => (h!(hardware::program_deployable), vec![id]),
            _ => return custom(&hw),
        },
        ["attributes"] => match m {
            M::GET => (h!(hardware::list_attributes), vec![]),
            M::POST => (h!(hardware::create_attribute), vec![]),
            _ => return collection(&dp),
        },
        ["attributes", id] => match m {
            M::GET => (h!(hardware::show_attribute), vec![id]),
            M::DELETE => (h!(hardware::delete_attribute), vec![id]),
            _ => return refuse(&dp),
        },
        ["agent", "hosts", host] => match m {
            M::GET => (h!(agent::show_host), vec![host]),
            M::PUT => (h!(agent::own_host), vec![host]),
            _ => return refuse(&[M::GET, M::PUT]),
        },
        ["agent", "hosts", host, "devices"] => match m {
            M::PUT => (h!(agent::report), vec![host]),
            _ => return refuse(&[M::PUT]),
        },
        ["agent", "hosts", host, "programs"] => match m {
            M::GET => (h!(agent::pending_programs), vec![host]),
            _ => return refuse(&[M::GET]),
        },
        ["agent", "hosts", host, "programs", id] => match m {
            M::PUT => (h!(agent::finish_program), vec![host, id]),
            _ => return refuse(&[M::PUT]),
        },
        ["agent", "hosts", host, "cleanings"] => match m {
            M::GET => (h!(cleaning::take), vec![host]),
            _ => return refuse(&[M::GET]),
        },
        ["agent", "hosts", host, "cleanings", rp] => match m {
            M::PUT => (h!(cleaning::finish), vec![host, rp]),
            _ => return refuse(&[M::PUT]),
        },
        ["maintenance"] => match m {
            M::GET => (h!(maintenance::show), vec![]),
            M::PUT => (h!(maintenance::start), vec![]),
            M::DELETE => (h!(maintenance::end), vec![]),
            _ => return refuse(&[M::GET, M::PUT, M::DELETE]),
        },
        ["device_cleanings"] => match m {
            M::GET => (h!(cleaning::list), vec![]),
            _ => return refuse(&[M::GET]),
        },
        ["device_cleanings", id, action @ ("clean" | "release")] => match m {
            M::POST => (h!(cleaning::act), vec![id, action]),
            _ => return refuse(&[M::POST]),
        },
        ["agent", "hosts", host, "kubernetes"] => match m {
            M::GET => (h!(kubernetes::show), vec![host]),
            M::PUT => (h!(kubernetes::save), vec![host]),
            _ => return refuse(&[M::GET, M::PUT]),
        },
        ["agent", "hosts", host, "partitions"] => match m {
            M::GET => (h!(agent::held_partitions), vec![host]),
            _ => return refuse(&[M::GET]),
        },
        ["agent", "hosts", host, "kubernetes", "claims", uid] => match m {
            M::PUT => (h!(claims::prepare), vec![host, uid]),
            M::DELETE => (h!(claims::unprepare), vec![host, uid]),
            _ => return refuse(&[M::PUT, M::DELETE]),
        },
        _ => return not_found(),
    };
    Ok((handler, params.into_iter().map(str::to_owned).collect()))
}

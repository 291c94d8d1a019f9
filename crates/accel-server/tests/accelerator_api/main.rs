//! The accelerator (Cyborg v2) API over HTTP: the real server on port 0 with a fresh
//! database per test, on SQLite and PostgreSQL; one module per resource.

mod app;
mod arqs;
mod bind_refusals;
mod hardware;
mod limits;
mod profiles;
#[path = "../common/query.rs"]
mod query;
#[path = "../common/reply.rs"]
mod reply;
mod versions;
mod wire;

//! The WebDriver client against real headless Chromium on a two-page site served
//! here: navigation, finds, text and attributes, a link, a form typed into and
//! submitted, a cookie's flags, a screenshot. Skips with a notice when Chromium is
//! not installed, unless `ACCEL_REQUIRE_BROWSER=1`.

use accel_testkit::browser::Browser;
use axum::extract::Query;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use std::collections::HashMap;

const HOME: &str = r#"<!doctype html><html><head><title>home</title></head><body>
<h1 data-test="heading">Hosts <span hidden>secret</span></h1>
<ul><li data-test="row" data-uuid="u1">cn1</li><li data-test="row" data-uuid="u2">cn2</li></ul>
<a data-test="next" href="/search">search</a></body></html>"#;

async fn search(Query(q): Query<HashMap<String, String>>) -> impl IntoResponse {
    let answer = q
        .get("q")
        .map(|q| format!(r#"<p data-test="answer">you asked for {q}</p>"#))
        .unwrap_or_default();
    (
        [("set-cookie", "sid=abc; HttpOnly; SameSite=Strict; Path=/")],
        Html(format!(
            r#"<!doctype html><html><head><title>search</title></head><body>
<form method="get" action="/search"><input name="q" data-test="q" value="old"></form>{answer}</body></html>"#
        )),
    )
}

#[tokio::test]
async fn drives_headless_chromium() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let app = axum::Router::new()
        .route("/", get(|| async { Html(HOME) }))
        .route("/search", get(search));
    let (addr, _stop) = accel_testkit::serve_fake(app).await;
    let base = format!("http://{addr}");

    browser.goto(&format!("{base}/")).await;
    assert_eq!(browser.title().await, "home");
    // Visible text only: the hidden span is not read.
    assert_eq!(browser.text_of("[data-test=heading]").await, "Hosts");
    let rows = browser.find_all("[data-test=row]").await;
    assert_eq!(rows.len(), 2);
    assert_eq!(browser.text(&rows[1]).await, "cn2");
    assert_eq!(
        browser.attr(&rows[0], "data-uuid").await.as_deref(),
        Some("u1")
    );
    assert_eq!(browser.attr(&rows[0], "title").await, None);
    assert!(browser.find_all_now("[data-test=missing]").await.is_empty());
    assert!(browser.source().await.contains("data-uuid=\"u2\""));

    let next = browser.find("[data-test=next]").await;
    browser.click_and_wait(&next).await;
    assert_eq!(browser.url().await, format!("{base}/search"));
    browser.fill("[data-test=q]", "cn 7").await;
    let q = browser.find("[data-test=q]").await;
    browser.submit(&q).await;
    let answer = browser.text_of("[data-test=answer]").await;
    assert_eq!(answer, "you asked for cn 7");
    assert_eq!(browser.url().await, format!("{base}/search?q=cn+7"));

    let sid = browser.cookie("sid").await.expect("the cookie is stored");
    assert_eq!(sid["value"], "abc");
    assert_eq!(sid["httpOnly"], true);
    assert_eq!(sid["sameSite"], "Strict");
    browser.delete_cookies().await;
    assert!(browser.cookie("sid").await.is_none());

    let field = browser.find("[data-test=q]").await;
    assert_eq!(
        browser
            .execute("return arguments[0].value + document.title", &[&field])
            .await,
        "oldsearch"
    );
    browser.scroll_to(&field).await;
    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // The IHDR chunk: the viewport's width is the window's (1400 px).
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert!((1300..=1400).contains(&width), "width {width}");
    browser.close().await;
}

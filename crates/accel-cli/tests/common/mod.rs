//! What the CLI's test files share: reading Placement as the admin of noauth.

use serde_json::Value;

/// `GET {placement}{path}` with the noauth admin token, as JSON.
pub async fn placement_get(placement: &str, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{placement}{path}"))
        .header("x-auth-token", "admin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

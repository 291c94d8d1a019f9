//! Version documents, microversion headers and negotiation.

use crate::app::{AccelApp, As};
use accel_testkit::server::BACKENDS;
use reqwest::Method;

#[tokio::test]
async fn version_documents_and_microversion_headers() {
    for backend in BACKENDS {
        let app = AccelApp::spawn(backend, None).await;
        for path in ["/", "/accelerator", "/accelerator/"] {
            let r = app.get(As::Anonymous, path).await;
            assert_eq!(r.status, 200, "{path}");
            assert_eq!(r.body["name"], "OpenStack Cyborg API");
            assert_eq!(r.body["default_version"]["id"], "v2");
            assert_eq!(r.body["versions"][0]["max_version"], "2.3");
            assert_eq!(r.body["versions"][0]["min_version"], "2.0");
            assert_eq!(r.body["versions"][0]["status"], "CURRENT");
            let href = r.body["versions"][0]["links"][0]["href"].as_str().unwrap();
            assert!(href.ends_with("/accelerator/v2"), "{href}");
            assert_eq!(
                r.header("openstack-api-maximum-version"),
                None,
                "no version headers on /"
            );
        }
        let r = app.get(As::Anonymous, "/accelerator/v2").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body["id"], "v2.0");
        assert!(r.body["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with("/accelerator/v2/"));
        assert_eq!(r.header("openstack-api-version"), Some("accelerator 2.0"));
        assert_eq!(r.header("openstack-api-minimum-version"), Some("2.0"));
        assert_eq!(r.header("openstack-api-maximum-version"), Some("2.3"));
        assert_eq!(r.header("vary"), Some("OpenStack-API-Version"));

        for (sent, answered) in [
            ("accelerator 2.2", "accelerator 2.2"),
            ("2.1", "accelerator 2.1"),
            ("accelerator latest", "accelerator 2.3"),
        ] {
            let r = app
                .call(
                    As::Admin,
                    Method::GET,
                    "/v2/device_profiles",
                    Some(sent),
                    None,
                )
                .await;
            assert_eq!(r.status, 200);
            assert_eq!(r.header("openstack-api-version"), Some(answered), "{sent}");
        }
        for (sent, message) in [
            ("accelerator 2.9", "Version 2.9 was requested but the minor version is not supported by this service. The supported version range is: [2.0, 2.3]."),
            ("accelerator 3.0", "Mutually exclusive versions requested. Version 3.0 requested but not supported by this service. The supported version range is: [2.0, 2.3]."),
            ("accelerator two", "Invalid value for OpenStack-API-Version header"),
        ] {
            let r = app
                .call(As::Admin, Method::GET, "/accelerator/v2/device_profiles", Some(sent), None)
                .await;
            assert_eq!(r.status, 406, "{sent}");
            assert_eq!(r.fault(), message);
            assert_eq!(r.header("openstack-api-maximum-version"), Some("2.3"));
        }

        let r = app.get(As::Anonymous, "/v2/device_profiles").await;
        assert_eq!(r.status, 401);
        assert_eq!(r.body["error"]["code"], 401);
        let r = app.get(As::Admin, "/v2/no_such_thing").await;
        assert_eq!(r.status, 404);
        assert_eq!(r.fault(), "The resource could not be found.");
        let r = app
            .send(As::Admin, Method::PUT, "/v2/device_profiles")
            .await;
        assert_eq!(r.status, 405);
        assert_eq!(r.header("allow"), Some("GET, POST, DELETE"));
    }
}

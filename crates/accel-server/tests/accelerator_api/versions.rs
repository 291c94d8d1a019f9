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
        // Version refusals are webob's 406 page (Pecan's JSON for `Accept:
        // application/json`); out of range with the range headers, unparsed with none.
        let json = [("x-auth-token", "admin"), ("accept", "application/json")];
        for (sent, message, range) in [
            ("accelerator 2.9", "Version 2.9 was requested but the minor version is not supported by this service. The supported version range is: [2.0, 2.3].", true),
            ("accelerator 3.0", "Mutually exclusive versions requested. Version 3.0 requested but not supported by this service. The supported version range is: [2.0, 2.3].", true),
            ("accelerator two", "Invalid value for OpenStack-API-Version header", false),
        ] {
            let r = app
                .call(As::Headers(&json), Method::GET, "/accelerator/v2/device_profiles", Some(sent), None)
                .await;
            assert_eq!(r.status, 406, "{sent}");
            let page: serde_json::Value =
                serde_json::from_str(r.body["error_message"].as_str().unwrap()).unwrap();
            assert_eq!(page, serde_json::json!({"code": 406, "title": "Not Acceptable", "description": message}));
            assert_eq!(r.header("openstack-api-maximum-version").is_some(), range, "{sent}");
            assert_eq!(r.header("openstack-api-version"), None);
        }
        let r = app
            .call(
                As::Admin,
                Method::GET,
                "/v2/device_profiles",
                Some("accelerator two"),
                None,
            )
            .await;
        assert_eq!(
            r.body["error_message"],
            "<html>\n <head>\n  <title>406 Not Acceptable</title>\n </head>\n <body>\n  <h1>406 Not Acceptable</h1>\n  The resource could not be generated that was acceptable to your browser\n(content of type */*. <br /><br />\nInvalid value for OpenStack-API-Version header\n </body>\n</html>"
        );

        let r = app.get(As::Anonymous, "/v2/device_profiles").await;
        assert_eq!(r.status, 401);
        assert_eq!(r.body["error"]["code"], 401);
        // Routing errors are Pecan's: webob's page, no version headers, a 405 naming
        // the controller's methods, a 404 for a PATCH on a collection without one and
        // for a GET of a custom action.
        let page = |r: &crate::app::Reply| -> serde_json::Value {
            serde_json::from_str(r.body["error_message"].as_str().unwrap()).unwrap()
        };
        let r = app
            .call(
                As::Headers(&json),
                Method::GET,
                "/v2/no_such_thing",
                None,
                None,
            )
            .await;
        assert_eq!(r.status, 404);
        assert_eq!(
            page(&r),
            serde_json::json!({"code": 404, "title": "Not Found", "description": ""})
        );
        assert_eq!(r.header("openstack-api-version"), None);
        for (method, path, status, allow) in [
            (
                Method::PUT,
                "/v2/device_profiles",
                405,
                Some("DELETE, GET, POST"),
            ),
            (Method::PATCH, "/v2/device_profiles", 404, None),
            (
                Method::PUT,
                "/v2/accelerator_requests",
                405,
                Some("DELETE, GET, PATCH, POST"),
            ),
            (
                Method::GET,
                "/v2/deployables/00000000-0000-0000-0000-000000000000/program",
                404,
                None,
            ),
            (Method::DELETE, "/", 405, Some("GET")),
            (Method::POST, "/accelerator/", 405, Some("GET")),
        ] {
            let r = app
                .call(As::Headers(&json), method.clone(), path, None, None)
                .await;
            assert_eq!(r.status, status, "{method} {path}");
            assert_eq!(r.header("allow"), allow, "{method} {path}");
            assert_eq!(r.header("openstack-api-version"), None, "{method} {path}");
        }
        let r = app.send(As::Admin, Method::PUT, "/").await;
        assert_eq!(
            r.body["error_message"],
            "<html>\n <head>\n  <title>405 Method Not Allowed</title>\n </head>\n <body>\n  <h1>405 Method Not Allowed</h1>\n  The method PUT is not allowed for this resource. <br /><br />\n\n </body>\n</html>"
        );
    }
}

//! An accelerator API answer as tests read it: status, headers, the JSON body (`Null`
//! when it is not JSON), and Cyborg's `error_message` envelope read back.

use serde_json::Value;

pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Reads a whole response.
    pub async fn read(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        Reply {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    /// The `faultstring` inside Cyborg's `error_message` envelope, whose `faultcode`
    /// must say whose fault it was and whose `debuginfo` must be empty.
    pub fn fault(&self) -> String {
        let inner = self.body["error_message"]
            .as_str()
            .unwrap_or_else(|| panic!("no error envelope in {}", self.body));
        let fault: Value = serde_json::from_str(inner).expect("fault JSON inside the envelope");
        assert_eq!(fault["debuginfo"], Value::Null);
        let code = if self.status < 500 {
            "Client"
        } else {
            "Server"
        };
        assert_eq!(fault["faultcode"], code);
        fault["faultstring"].as_str().unwrap().to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

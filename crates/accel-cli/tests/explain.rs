//! `accel explain`: the built binary against the real server (port 0, a fresh database
//! per backend) loaded with the small cloud of `data/explain_cloud.json` (the same API
//! calls scripts/explain-upstream.sh sends to upstream Placement):
//!
//! ```text
//! host1  VCPU 8 ─┬─ host1_fpga0  CUSTOM_ACCELERATOR_FPGA 2, CUSTOM_FPGA_INTEL
//!   aggregate A  └─ host1_gpu0   PGPU 1, CUSTOM_GPU_NVIDIA
//! host2  VCPU 8 ─── host2_fpga0  CUSTOM_ACCELERATOR_FPGA 1, CUSTOM_FPGA_XILINX (wrong trait)
//! host3  VCPU 8 ─── host3_fpga0  CUSTOM_ACCELERATOR_FPGA 1, CUSTOM_FPGA_INTEL (in use: full)
//! host4  VCPU 2     (no accelerator)
//! host5  VCPU 8 ─── host5_fpga0  CUSTOM_ACCELERATOR_FPGA 4 (max_unit 1), CUSTOM_FPGA_INTEL
//! shared_disk  DISK_GB 100, MISC_SHARES_VIA_AGGREGATE, aggregate A
//! ```

mod common;

use accel_testkit::server::{TestServer, BACKENDS};
use common::Run;
use serde_json::{json, Value};

const CLOUD: &str = include_str!("data/explain_cloud.json");
const ISSUE_QUERY: &str = "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_FPGA_INTEL&group_policy=isolate";
const ROOTS: [&str; 6] = ["host1", "host2", "host3", "host4", "host5", "shared_disk"];
const CODES: [&str; 16] = [
    "no_inventory",
    "capacity",
    "max_unit",
    "min_unit",
    "step_size",
    "required_trait",
    "forbidden_trait",
    "any_trait",
    "member_of",
    "in_tree",
    "root_required",
    "root_forbidden",
    "same_subtree",
    "isolate",
    "single_tree",
    "unknown_trait",
];

/// The fixture's uuid of provider `n` (`host1` is 1, `host1_fpga0` 11, ...).
fn rp(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

struct Cloud {
    server: TestServer,
}

impl Cloud {
    async fn load(server: TestServer) -> Cloud {
        let http = reqwest::Client::new();
        let calls: Vec<(String, String, Value)> = serde_json::from_str(CLOUD).unwrap();
        for (method, path, body) in calls {
            let mut req = http
                .request(
                    method.parse().unwrap(),
                    format!("{}{path}", server.placement),
                )
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.39");
            if !body.is_null() {
                req = req.json(&body);
            }
            let r = req.send().await.unwrap();
            assert!(r.status().is_success(), "{method} {path}: {}", r.status());
        }
        Cloud { server }
    }

    async fn accel(&self, args: &[&str]) -> Run {
        let accelerator = format!("{}/accelerator", self.server.accel);
        let env = [
            ("ACCEL_PLACEMENT_URL", self.server.placement.as_str()),
            ("ACCEL_URL", accelerator.as_str()),
            ("ACCEL_TOKEN", "admin"),
        ];
        common::accel(args, &env).await
    }

    async fn explain(&self, args: &[&str]) -> Value {
        let mut all = vec!["explain", "-f", "json"];
        all.extend_from_slice(args);
        self.accel(&all).await.json()
    }
}

fn root<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer["roots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no root {name} in {answer}"))
}

/// The reasons of `name` with this code.
fn reasons<'a>(answer: &'a Value, name: &str, code: &str) -> Vec<&'a Value> {
    root(answer, name)["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["code"] == code)
        .collect()
}

/// The shape every answer has: the six roots in name order with their uuids, every
/// reason with all seven fields, a known code, and none on a fitting root while every
/// other root has at least one.
fn check_shape(answer: &Value) {
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(answer), ["candidates", "roots"]);
    for r in answer["roots"].as_array().unwrap() {
        assert_eq!(keys(r), ["fits", "name", "reasons", "uuid"]);
        let reasons = r["reasons"].as_array().unwrap();
        assert_eq!(r["fits"] == true, reasons.is_empty(), "{r}");
        for x in reasons {
            assert_eq!(
                keys(x),
                [
                    "code",
                    "detail",
                    "group",
                    "provider",
                    "provider_name",
                    "resource_class",
                    "trait"
                ]
            );
            assert!(CODES.contains(&x["code"].as_str().unwrap()), "{x}");
            assert!(!x["detail"].as_str().unwrap().is_empty(), "{x}");
        }
    }
}

fn names_and_fits(answer: &Value) -> Vec<(String, bool)> {
    answer["roots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["fits"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn explain_the_issue_query_field_by_field_and_composed_from_a_device_profile() {
    for backend in BACKENDS {
        let cloud = Cloud::load(TestServer::spawn(backend).await).await;
        let a = cloud.explain(&[ISSUE_QUERY]).await;
        check_shape(&a);
        // host1 (one Intel FPGA of two free) and host5 (one region of four) fit.
        assert_eq!(a["candidates"], 2);
        let fits: Vec<(String, bool)> = ROOTS
            .iter()
            .map(|n| ((*n).to_owned(), ["host1", "host5"].contains(n)))
            .collect();
        assert_eq!(names_and_fits(&a), fits);
        for (i, n) in [1, 2, 3, 4, 5, 9].into_iter().enumerate() {
            assert_eq!(a["roots"][i]["uuid"], rp(n));
        }
        // host2: its FPGA is a Xilinx.
        let wrong = reasons(&a, "host2", "required_trait");
        assert_eq!(wrong.len(), 1, "{a}");
        assert_eq!(wrong[0]["group"], "1");
        assert_eq!(wrong[0]["provider"], rp(21));
        assert_eq!(wrong[0]["trait"], "CUSTOM_FPGA_INTEL");
        assert_eq!(wrong[0]["resource_class"], Value::Null);
        // host3: its Intel FPGA is taken, with the numbers.
        assert_eq!(
            root(&a, "host3")["reasons"],
            json!([{
                "code": "capacity", "group": "1", "provider": rp(31),
                "provider_name": "host3_fpga0", "resource_class": "CUSTOM_ACCELERATOR_FPGA", "trait": null,
                "detail": root(&a, "host3")["reasons"][0]["detail"],
            }])
        );
        let detail = root(&a, "host3")["reasons"][0]["detail"].as_str().unwrap();
        assert!(
            detail.contains("total 1") && detail.contains("used 1"),
            "{detail}"
        );
        // host4 has no FPGA, the shared disk neither VCPU nor FPGA.
        let none = reasons(&a, "host4", "no_inventory");
        assert_eq!(none.len(), 1, "{a}");
        assert_eq!(none[0]["group"], "1");
        assert_eq!(none[0]["resource_class"], "CUSTOM_ACCELERATOR_FPGA");
        let vcpu: Vec<_> = reasons(&a, "shared_disk", "no_inventory")
            .into_iter()
            .filter(|r| r["group"] == "")
            .collect();
        assert_eq!(vcpu.len(), 1, "{a}");
        assert_eq!(vcpu[0]["resource_class"], "VCPU");

        // The table: a line per root, an indented line per reason.
        let t = cloud.accel(&["explain", ISSUE_QUERY]).await;
        assert_eq!(t.code, Some(0), "{}", t.stderr);
        let lines: Vec<&str> = t.stdout.lines().collect();
        assert_eq!(lines[0], format!("2 candidate(s) for {ISSUE_QUERY}"));
        assert!(lines[1].starts_with("host1 ") && lines[1].ends_with(&format!("{}  fits", rp(1))));
        let host3 = lines.iter().position(|l| l.starts_with("host3 ")).unwrap();
        assert!(lines[host3].ends_with("does not fit"));
        // The reason names its provider (issue 31 item 7: only JSON had its uuid).
        assert!(
            lines[host3 + 1]
                .starts_with("    capacity  1  host3_fpga0  needs 1 CUSTOM_ACCELERATOR_FPGA"),
            "{}",
            t.stdout
        );

        // Composed from a device profile and the flavor's resources, as Nova does: the
        // profile's group is `_device_profile_0`, and the answer is the one for the
        // query Nova would log.
        let dp = cloud
            .accel(&[
                "device-profile",
                "create",
                "intel",
                "--group",
                "resources:CUSTOM_ACCELERATOR_FPGA=1,trait:CUSTOM_FPGA_INTEL=required",
            ])
            .await;
        assert_eq!(dp.code, Some(0), "{}", dp.stderr);
        let nova = "required_device_profile_0=CUSTOM_FPGA_INTEL&resources=VCPU:1&resources_device_profile_0=CUSTOM_ACCELERATOR_FPGA:1";
        let composed = cloud
            .explain(&["--device-profile", "intel", "--resources", "VCPU=1"])
            .await;
        check_shape(&composed);
        assert_eq!(composed, cloud.explain(&[nova]).await);
        assert_eq!(names_and_fits(&composed), fits);
        assert_eq!(
            reasons(&composed, "host2", "required_trait")[0]["group"],
            "_device_profile_0"
        );
        let t = cloud
            .accel(&[
                "explain",
                "--device-profile",
                "intel",
                "--resources",
                "VCPU=1",
            ])
            .await;
        assert_eq!(
            t.stdout.lines().next(),
            Some(format!("2 candidate(s) for {nova}").as_str())
        );
        let missing = cloud.accel(&["explain", "--device-profile", "nope"]).await;
        assert_eq!(missing.code, Some(1));
        assert!(missing.stderr.contains("found 0"), "{}", missing.stderr);
    }
}

#[tokio::test]
async fn explain_one_root_other_queries_and_placement_errors() {
    for backend in BACKENDS {
        let cloud = Cloud::load(TestServer::spawn(backend).await).await;
        let two = "resources=VCPU:1&resources_ACCEL=CUSTOM_ACCELERATOR_FPGA:2&required_ACCEL=CUSTOM_FPGA_INTEL";
        let all = cloud.explain(&[two]).await;
        check_shape(&all);
        assert_eq!(all["candidates"], 1);
        // --root by name, by uuid, or by a provider of the tree: that root only, as in
        // the whole answer.
        for key in ["host5".to_owned(), rp(5), rp(51)] {
            let one = cloud.explain(&[two, "--root", &key]).await;
            assert_eq!(one["candidates"], 1);
            assert_eq!(one["roots"], json!([root(&all, "host5")]));
        }
        let max = reasons(&all, "host5", "max_unit");
        assert_eq!(max.len(), 1, "{all}");
        assert_eq!(max[0]["group"], "_ACCEL");
        assert_eq!(max[0]["provider"], rp(51));
        let one = cloud.explain(&[two, "--root", "host1"]).await;
        assert_eq!(one["roots"], json!([root(&all, "host1")]));
        assert_eq!(one["roots"][0]["fits"], true);
        let unknown = cloud.accel(&["explain", two, "--root", "host9"]).await;
        assert_eq!(unknown.code, Some(1));
        assert!(
            unknown.stderr.contains("--root host9"),
            "{}",
            unknown.stderr
        );

        // The shared disk is host1's through the aggregate.
        let disk = cloud.explain(&["resources=VCPU:1,DISK_GB:10"]).await;
        check_shape(&disk);
        assert_eq!(disk["candidates"], 1);
        let fits: Vec<String> = names_and_fits(&disk)
            .into_iter()
            .filter(|(_, f)| *f)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(fits, ["host1", "shared_disk"]);
        let one = cloud
            .explain(&["resources=VCPU:1,DISK_GB:10", "--root", "host1"])
            .await;
        assert_eq!(one["roots"][0]["fits"], true);

        // Before 1.29 a candidate takes from one provider of a tree.
        let old = cloud
            .explain(&[
                "resources=VCPU:1,CUSTOM_ACCELERATOR_FPGA:1",
                "--microversion",
                "1.28",
            ])
            .await;
        check_shape(&old);
        assert_eq!(old["candidates"], 0);
        assert_eq!(reasons(&old, "host1", "single_tree").len(), 1, "{old}");
        let nested = cloud
            .explain(&["resources=VCPU:1,CUSTOM_ACCELERATOR_FPGA:1"])
            .await;
        assert_eq!(nested["candidates"], 3, "host1, host2 and host5");

        // A request-wide rule has no group.
        let rr = cloud
            .explain(&["resources=VCPU:1&root_required=CUSTOM_FPGA_INTEL"])
            .await;
        check_shape(&rr);
        assert_eq!(rr["candidates"], 0);
        let host1 = reasons(&rr, "host1", "root_required");
        assert_eq!(host1.len(), 1, "{rr}");
        assert_eq!(host1[0]["group"], Value::Null);
        assert_eq!(host1[0]["trait"], "CUSTOM_FPGA_INTEL");
        assert_eq!(host1[0]["provider"], rp(1));

        // Placement's 400 is the command's error, and nothing is printed.
        let bad = cloud
            .accel(&[
                "explain",
                "resources1=CUSTOM_ACCELERATOR_FPGA:1&resources2=PGPU:1",
            ])
            .await;
        assert_eq!(bad.code, Some(1), "{}", bad.stdout);
        assert!(bad.stdout.is_empty());
        assert!(
            bad.stderr.contains("HTTP 400") && bad.stderr.contains("group_policy"),
            "{}",
            bad.stderr
        );
        // A trait Placement does not know is explained, not Placement's raw 400: no
        // root fits, each for that trait (issue 31 item 7); in any request group, and
        // in root_required.
        for (query, group) in [
            (
                "resources=VCPU:1&resources1=CUSTOM_ACCELERATOR_FPGA:1&required1=CUSTOM_NO_SUCH",
                json!("1"),
            ),
            ("resources=VCPU:1&required=!CUSTOM_NO_SUCH", json!("")),
            ("resources=VCPU:1&root_required=CUSTOM_NO_SUCH", Value::Null),
        ] {
            let u = cloud.explain(&[query]).await;
            check_shape(&u);
            assert_eq!(u["candidates"], 0, "{u}");
            for name in ROOTS {
                let r = reasons(&u, name, "unknown_trait");
                assert_eq!(r.len(), 1, "{u}");
                assert_eq!(r[0]["trait"], "CUSTOM_NO_SUCH");
                assert_eq!(r[0]["group"], group);
                assert!(
                    r[0]["detail"].as_str().unwrap().contains("no such trait"),
                    "{u}"
                );
                assert_eq!(root(&u, name)["reasons"].as_array().unwrap().len(), 1);
            }
        }
        let t = cloud
            .accel(&["explain", "resources=VCPU:1&required=CUSTOM_NO_SUCH"])
            .await;
        assert_eq!(t.code, Some(0), "{}", t.stderr);
        assert!(
            t.stdout
                .contains("    unknown_trait  (unsuffixed)  -  no such trait CUSTOM_NO_SUCH"),
            "{}",
            t.stdout
        );
        let bad = cloud.accel(&["explain", "resources=NOT_A_CLASS:1"]).await;
        assert_eq!(bad.code, Some(1));
        assert!(bad.stderr.contains("HTTP 400"), "{}", bad.stderr);
        let nothing = cloud.accel(&["explain"]).await;
        assert_eq!(nothing.code, Some(1));
        assert!(
            nothing.stderr.contains("give a QUERY"),
            "{}",
            nothing.stderr
        );
    }
}

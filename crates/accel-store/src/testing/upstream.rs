//! An upstream Placement database for import and export tests: upstream Placement
//! 16.0.0's tables (at alembic revision `a082b8bb98d0`, the columns and types its
//! migrations create, in SQLite's spelling) in a SQLite file, holding a small cloud.

/// Upstream Placement's schema at `a082b8bb98d0` (SQLite spelling of SQLAlchemy's).
pub const UPSTREAM_DDL: &[&str] = &[
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
    "CREATE TABLE resource_classes (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL UNIQUE)",
    "CREATE TABLE traits (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL UNIQUE)",
    "CREATE TABLE resource_providers (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, name VARCHAR(200) UNIQUE, generation INTEGER, root_provider_id INTEGER, parent_provider_id INTEGER)",
    "CREATE TABLE inventories (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, resource_provider_id INTEGER NOT NULL, resource_class_id INTEGER NOT NULL, total INTEGER NOT NULL, reserved INTEGER NOT NULL, min_unit INTEGER NOT NULL, max_unit INTEGER NOT NULL, step_size INTEGER NOT NULL, allocation_ratio FLOAT NOT NULL)",
    "CREATE TABLE placement_aggregates (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) UNIQUE)",
    "CREATE TABLE resource_provider_aggregates (created_at DATETIME, updated_at DATETIME, resource_provider_id INTEGER NOT NULL, aggregate_id INTEGER NOT NULL, PRIMARY KEY (resource_provider_id, aggregate_id))",
    "CREATE TABLE resource_provider_traits (created_at DATETIME, updated_at DATETIME, trait_id INTEGER NOT NULL, resource_provider_id INTEGER NOT NULL, PRIMARY KEY (trait_id, resource_provider_id))",
    "CREATE TABLE projects (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, external_id VARCHAR(255) NOT NULL UNIQUE)",
    "CREATE TABLE users (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, external_id VARCHAR(255) NOT NULL UNIQUE)",
    "CREATE TABLE consumer_types (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(255) NOT NULL UNIQUE)",
    "CREATE TABLE consumers (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, project_id INTEGER NOT NULL, user_id INTEGER NOT NULL, generation INTEGER NOT NULL DEFAULT 0, consumer_type_id INTEGER)",
    "CREATE TABLE allocations (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, resource_provider_id INTEGER NOT NULL, consumer_id VARCHAR(36) NOT NULL, resource_class_id INTEGER NOT NULL, used INTEGER NOT NULL)",
];

pub const CN1: &str = "11111111-1111-4111-8111-000000000001";
pub const NUMA: &str = "11111111-1111-4111-8111-000000000002";
pub const SHARED: &str = "11111111-1111-4111-8111-000000000003";
pub const VM1: &str = "22222222-2222-4222-8222-000000000001";
pub const VM2: &str = "22222222-2222-4222-8222-000000000002";

/// A small cloud as upstream stores it: a compute node with a NUMA child, a shared
/// disk provider in an aggregate, a custom class (upstream id 10003, accel's custom
/// ids start elsewhere) and trait, two consumers of two projects.
pub const CLOUD: &[&str] = &[
    "INSERT INTO alembic_version VALUES ('a082b8bb98d0')",
    "INSERT INTO resource_classes (id, name, created_at) VALUES (0, 'VCPU', '2024-01-02 03:04:05.000000'), (1, 'MEMORY_MB', '2024-01-02 03:04:05'), (2, 'DISK_GB', '2024-01-02 03:04:05'), (10003, 'CUSTOM_GOLD', '2024-01-02 03:04:05')",
    "INSERT INTO traits (id, name, created_at) VALUES (7, 'HW_CPU_X86_AVX2', '2024-01-02 03:04:05'), (9, 'MISC_SHARES_VIA_AGGREGATE', '2024-01-02 03:04:05'), (500, 'CUSTOM_FAST', '2024-01-02 03:04:05')",
    "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id, parent_provider_id, created_at, updated_at) VALUES \
     (5, '11111111-1111-4111-8111-000000000001', 'cn1', 7, 5, NULL, '2024-01-02 03:04:05', '2024-02-02 03:04:05'), \
     (8, '11111111-1111-4111-8111-000000000002', 'cn1-numa0', 3, 5, 5, '2024-01-02 03:04:05', NULL), \
     (9, '11111111-1111-4111-8111-000000000003', 'shared-disk', 2, 9, NULL, '2024-01-02 03:04:05', NULL)",
    "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio) VALUES \
     (5, 1, 4096, 512, 1, 4096, 256, 1.5), (8, 0, 8, 1, 1, 4, 1, 16.0), (8, 10003, 4, 0, 1, 4, 2, 1.0), (9, 2, 1000, 0, 10, 500, 10, 0.9)",
    "INSERT INTO placement_aggregates (id, uuid) VALUES (4, '33333333-3333-4333-8333-000000000001')",
    "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id) VALUES (5, 4), (9, 4)",
    "INSERT INTO resource_provider_traits (resource_provider_id, trait_id) VALUES (8, 7), (8, 500), (9, 9)",
    "INSERT INTO projects (id, external_id) VALUES (3, 'proj-a'), (6, 'proj-b')",
    "INSERT INTO users (id, external_id) VALUES (2, 'user-a')",
    "INSERT INTO consumer_types (id, name) VALUES (1, 'INSTANCE')",
    "INSERT INTO consumers (id, uuid, project_id, user_id, generation, consumer_type_id, created_at) VALUES \
     (10, '22222222-2222-4222-8222-000000000001', 3, 2, 4, 1, '2024-01-02 03:04:05'), \
     (11, '22222222-2222-4222-8222-000000000002', 6, 2, 1, NULL, '2024-01-02 03:04:05')",
    "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used) VALUES \
     (8, '22222222-2222-4222-8222-000000000001', 0, 2), (8, '22222222-2222-4222-8222-000000000001', 10003, 2), \
     (5, '22222222-2222-4222-8222-000000000001', 1, 1024), (9, '22222222-2222-4222-8222-000000000001', 2, 100), \
     (8, '22222222-2222-4222-8222-000000000002', 0, 1)",
];

/// An upstream-shaped SQLite file, removed when dropped.
#[derive(Debug)]
pub struct UpstreamFile {
    /// `sqlite://ABSOLUTE_PATH`.
    pub url: String,
    path: std::path::PathBuf,
}

impl Drop for UpstreamFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A SQLite file holding upstream's schema, `CLOUD`, then `extra`.
pub async fn source(extra: &[&str]) -> UpstreamFile {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let path = std::env::temp_dir().join(format!("accel-import-{}.db", uuid::Uuid::new_v4()));
    let url = format!("sqlite://{}", path.display());
    let mut c = sqlx::AnyConnection::connect(&format!("{url}?mode=rwc"))
        .await
        .expect("upstream test database");
    for sql in UPSTREAM_DDL.iter().chain(CLOUD).chain(extra) {
        sqlx::query(sql)
            .execute(&mut c)
            .await
            .expect("upstream test database");
    }
    c.close().await.expect("upstream test database");
    UpstreamFile { url, path }
}

/// An empty upstream-shaped database (what `placement-manage db sync` leaves).
pub async fn empty_upstream() -> UpstreamFile {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let path = std::env::temp_dir().join(format!("accel-export-{}.db", uuid::Uuid::new_v4()));
    let url = format!("sqlite://{}", path.display());
    let mut c = sqlx::AnyConnection::connect(&format!("{url}?mode=rwc"))
        .await
        .expect("upstream test database");
    for sql in UPSTREAM_DDL.iter().chain(&CLOUD[..1]) {
        sqlx::query(sql)
            .execute(&mut c)
            .await
            .expect("upstream test database");
    }
    c.close().await.expect("upstream test database");
    UpstreamFile { url, path }
}

// ---- Cyborg ----

/// Upstream Cyborg 17.0.0's tables (alembic revision `b47c8f2d1e3a`, the columns its
/// migrations create, in SQLite's spelling; enums as text), then its version row.
pub const CYBORG_DDL: &[&str] = &[
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)",
    "CREATE TABLE device_profiles (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, name VARCHAR(255) NOT NULL UNIQUE, profile_json TEXT NOT NULL, description TEXT)",
    "CREATE TABLE devices (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, type VARCHAR(6) NOT NULL, vendor VARCHAR(255) NOT NULL, model VARCHAR(255) NOT NULL, std_board_info TEXT, vendor_board_info TEXT, hostname VARCHAR(255) NOT NULL, status VARCHAR(11) NOT NULL, device_state VARCHAR(16))",
    "CREATE TABLE controlpath_ids (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, device_id INTEGER NOT NULL, cpid_type VARCHAR(3) NOT NULL, cpid_info VARCHAR(255) NOT NULL)",
    "CREATE TABLE deployables (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, parent_id INTEGER, root_id INTEGER, name VARCHAR(255) NOT NULL, num_accelerators INTEGER NOT NULL, device_id INTEGER NOT NULL, rp_uuid VARCHAR(36), driver_name VARCHAR(100), bitstream_id VARCHAR(36))",
    "CREATE TABLE attributes (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, deployable_id INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL)",
    "CREATE TABLE attach_handles (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, deployable_id INTEGER NOT NULL, cpid_id INTEGER NOT NULL, in_use BOOLEAN, attach_type VARCHAR(8) NOT NULL, attach_info VARCHAR(255) NOT NULL)",
    "CREATE TABLE extended_accelerator_requests (created_at DATETIME, updated_at DATETIME, id INTEGER NOT NULL PRIMARY KEY, uuid VARCHAR(36) NOT NULL UNIQUE, project_id VARCHAR(255), state VARCHAR(11) NOT NULL, device_profile_id INTEGER NOT NULL, hostname VARCHAR(255), device_rp_uuid VARCHAR(36), attach_handle_id INTEGER, substate VARCHAR(7) NOT NULL, deployable_id INTEGER, device_profile_group_id INTEGER NOT NULL, instance_uuid VARCHAR(36))",
    "INSERT INTO alembic_version VALUES ('b47c8f2d1e3a')",
];

pub const CYBORG_RP: &str = "55555555-5555-4555-8555-000000000001";
pub const CYBORG_BOUND: &str = "66666666-6666-4666-8666-000000000002";
pub const CYBORG_VM: &str = "77777777-7777-4777-8777-000000000001";

/// One host's GPU (a deployable with two handles, one taken) and three ARQs: Initial,
/// Bound (to the taken handle), BindFailed.
pub const CYBORG_CLOUD: &[&str] = &[
    "INSERT INTO device_profiles (id, uuid, name, profile_json, description, created_at, updated_at) VALUES \
     (3, '88888888-8888-4888-8888-000000000001', 'gpu', '{\"groups\": [{\"resources:PGPU\": \"1\", \"trait:CUSTOM_X\": \"required\"}, {\"resources:PGPU\": 2}]}', 'two groups', '2024-01-02 03:04:05', NULL)",
    "INSERT INTO devices (id, uuid, type, vendor, model, std_board_info, vendor_board_info, hostname, status, device_state, created_at, updated_at) VALUES \
     (4, '99999999-9999-4999-8999-000000000001', 'GPU', '10de', '1eb8', '{\"a\": 1}', NULL, 'host-a', 'maintaining', 'available', '2024-01-02 03:04:05', '2024-02-02 03:04:05')",
    "INSERT INTO controlpath_ids (id, uuid, device_id, cpid_type, cpid_info, created_at) VALUES (2, 'aaaaaaaa-aaaa-4aaa-8aaa-000000000001', 4, 'PCI', '{}', '2024-01-02 03:04:05')",
    "INSERT INTO deployables (id, uuid, parent_id, root_id, name, num_accelerators, device_id, rp_uuid, driver_name, created_at) VALUES \
     (6, 'bbbbbbbb-bbbb-4bbb-8bbb-000000000001', NULL, NULL, 'host-a_GPU', 2, 4, '55555555-5555-4555-8555-000000000001', 'nvidia', '2024-01-02 03:04:05'), \
     (7, 'bbbbbbbb-bbbb-4bbb-8bbb-000000000002', 6, 6, 'host-a_GPU_0', 1, 4, NULL, 'nvidia', '2024-01-02 03:04:05')",
    "INSERT INTO attributes (id, uuid, deployable_id, key, value, created_at) VALUES (9, 'cccccccc-cccc-4ccc-8ccc-000000000001', 6, 'rc', 'PGPU', '2024-01-02 03:04:05')",
    "INSERT INTO attach_handles (id, uuid, deployable_id, cpid_id, in_use, attach_type, attach_info, created_at) VALUES \
     (11, 'dddddddd-dddd-4ddd-8ddd-000000000001', 6, 2, 1, 'PCI', '{\"bus\": \"0c\"}', '2024-01-02 03:04:05'), \
     (12, 'dddddddd-dddd-4ddd-8ddd-000000000002', 6, 2, 0, 'PCI', '{\"bus\": \"0d\"}', '2024-01-02 03:04:05')",
    "INSERT INTO extended_accelerator_requests (id, uuid, project_id, state, device_profile_id, device_profile_group_id, hostname, device_rp_uuid, instance_uuid, attach_handle_id, deployable_id, substate, created_at, updated_at) VALUES \
     (20, '66666666-6666-4666-8666-000000000001', 'proj', 'Initial', 3, 1, NULL, NULL, NULL, NULL, NULL, 'Initial', '2024-01-02 03:04:05', NULL), \
     (21, '66666666-6666-4666-8666-000000000002', 'proj', 'Bound', 3, 0, 'host-a', '55555555-5555-4555-8555-000000000001', '77777777-7777-4777-8777-000000000001', 11, 6, 'Initial', '2024-01-02 03:04:05', '2024-01-03 03:04:05'), \
     (22, '66666666-6666-4666-8666-000000000003', 'proj', 'BindFailed', 3, 0, 'host-a', '55555555-5555-4555-8555-000000000099', '77777777-7777-4777-8777-000000000002', NULL, NULL, 'Initial', '2024-01-02 03:04:05', NULL)",
];

/// A SQLite file holding each statement of `parts` in turn (`&[CYBORG_DDL,
/// CYBORG_CLOUD, extra]`).
pub async fn cyborg_source(parts: &[&[&str]]) -> UpstreamFile {
    use sqlx::Connection;
    sqlx::any::install_default_drivers();
    let path = std::env::temp_dir().join(format!("accel-cyborg-{}.db", uuid::Uuid::new_v4()));
    let url = format!("sqlite://{}", path.display());
    let mut c = sqlx::AnyConnection::connect(&format!("{url}?mode=rwc"))
        .await
        .expect("upstream test database");
    for sql in parts.iter().flat_map(|p| p.iter()) {
        sqlx::query(sql)
            .execute(&mut c)
            .await
            .expect("upstream test database");
    }
    c.close().await.expect("upstream test database");
    UpstreamFile { url, path }
}

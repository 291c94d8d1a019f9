-- Accelerator (Cyborg) records: device profiles, hardware, ARQs, durable bind jobs.
CREATE TABLE device_profiles (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    name VARCHAR(255) NOT NULL UNIQUE,
    description LONGTEXT,
    `groups` LONGTEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE TABLE devices (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    type VARCHAR(16) NOT NULL,
    vendor VARCHAR(255) NOT NULL,
    model VARCHAR(255) NOT NULL,
    std_board_info LONGTEXT,
    vendor_board_info LONGTEXT,
    hostname VARCHAR(255) NOT NULL,
    status VARCHAR(16) NOT NULL DEFAULT 'enabled',
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX devices_hostname_idx ON devices(hostname);
CREATE TABLE control_path_ids (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    device_id BIGINT NOT NULL,
    cpid_type VARCHAR(16) NOT NULL,
    cpid_info VARCHAR(255) NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (device_id) REFERENCES devices(id)
);
CREATE INDEX control_path_ids_device_idx ON control_path_ids(device_id);
CREATE TABLE deployables (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    parent_id BIGINT,
    root_id BIGINT,
    name VARCHAR(255) NOT NULL,
    num_accelerators BIGINT NOT NULL,
    device_id BIGINT NOT NULL,
    rp_uuid VARCHAR(36),
    driver_name VARCHAR(100),
    bitstream_id VARCHAR(36),
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (device_id) REFERENCES devices(id)
);
CREATE INDEX deployables_device_idx ON deployables(device_id);
CREATE INDEX deployables_rp_uuid_idx ON deployables(rp_uuid);
CREATE TABLE attributes (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    deployable_id BIGINT NOT NULL,
    `key` LONGTEXT NOT NULL,
    value LONGTEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (deployable_id) REFERENCES deployables(id)
);
CREATE INDEX attributes_deployable_idx ON attributes(deployable_id);
CREATE TABLE attach_handles (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    deployable_id BIGINT NOT NULL,
    cpid_id BIGINT NOT NULL,
    in_use BIGINT NOT NULL DEFAULT 0,
    attach_type VARCHAR(16) NOT NULL,
    attach_info VARCHAR(255) NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (deployable_id) REFERENCES deployables(id),
    FOREIGN KEY (cpid_id) REFERENCES control_path_ids(id)
);
CREATE INDEX attach_handles_deployable_idx ON attach_handles(deployable_id, in_use);
CREATE TABLE extended_accelerator_requests (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    project_id VARCHAR(255),
    state VARCHAR(16) NOT NULL,
    device_profile_id BIGINT NOT NULL,
    device_profile_group_id BIGINT NOT NULL DEFAULT 0,
    hostname VARCHAR(255),
    device_rp_uuid VARCHAR(36),
    instance_uuid VARCHAR(36),
    attach_handle_id BIGINT,
    deployable_id BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (device_profile_id) REFERENCES device_profiles(id),
    FOREIGN KEY (attach_handle_id) REFERENCES attach_handles(id),
    FOREIGN KEY (deployable_id) REFERENCES deployables(id)
);
CREATE INDEX arqs_instance_idx ON extended_accelerator_requests(instance_uuid);
CREATE INDEX arqs_project_idx ON extended_accelerator_requests(project_id);
CREATE INDEX arqs_profile_idx ON extended_accelerator_requests(device_profile_id);
CREATE INDEX arqs_device_rp_idx ON extended_accelerator_requests(device_rp_uuid);
CREATE TABLE bind_jobs (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    arq_uuid VARCHAR(36) NOT NULL UNIQUE,
    state VARCHAR(16) NOT NULL,
    deadline BIGINT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (arq_uuid) REFERENCES extended_accelerator_requests(uuid)
);
CREATE INDEX bind_jobs_state_deadline_idx ON bind_jobs(state, deadline);

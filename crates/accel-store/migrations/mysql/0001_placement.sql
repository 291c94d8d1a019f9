-- MariaDB/MySQL. Unlike the other backends, no foreign key refers to its own table
-- (resource_providers' root and parent, deployables' root and parent): InnoDB checks a
-- foreign key row by row, not at the end of the statement, so deleting a root (whose
-- root is itself) or a parent and its children in one statement would fail. The store
-- never deletes a parent that has children (`Conflict::CannotDeleteParent`).
-- Placement inventory: providers, classes, traits, aggregates, consumers, allocations.
CREATE TABLE resource_classes (
    id BIGINT PRIMARY KEY,
    name VARCHAR(255) NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE TABLE traits (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(255) NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE TABLE resource_providers (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    name VARCHAR(200) NOT NULL UNIQUE,
    generation BIGINT NOT NULL DEFAULT 0,
    root_provider_id BIGINT,
    parent_provider_id BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT
);
CREATE INDEX resource_providers_root_idx ON resource_providers(root_provider_id);
CREATE INDEX resource_providers_parent_idx ON resource_providers(parent_provider_id);
CREATE TABLE inventories (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    resource_provider_id BIGINT NOT NULL,
    resource_class_id BIGINT NOT NULL,
    total BIGINT NOT NULL,
    reserved BIGINT NOT NULL,
    min_unit BIGINT NOT NULL,
    max_unit BIGINT NOT NULL,
    step_size BIGINT NOT NULL,
    allocation_ratio DOUBLE NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    UNIQUE (resource_provider_id, resource_class_id),
    FOREIGN KEY (resource_provider_id) REFERENCES resource_providers(id)
);
CREATE INDEX inventories_rc_idx ON inventories(resource_class_id);
CREATE TABLE placement_aggregates (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE
);
CREATE TABLE resource_provider_aggregates (
    resource_provider_id BIGINT NOT NULL,
    aggregate_id BIGINT NOT NULL,
    PRIMARY KEY (resource_provider_id, aggregate_id),
    FOREIGN KEY (resource_provider_id) REFERENCES resource_providers(id),
    FOREIGN KEY (aggregate_id) REFERENCES placement_aggregates(id)
);
CREATE INDEX rpa_aggregate_idx ON resource_provider_aggregates(aggregate_id);
CREATE TABLE resource_provider_traits (
    resource_provider_id BIGINT NOT NULL,
    trait_id BIGINT NOT NULL,
    PRIMARY KEY (resource_provider_id, trait_id),
    FOREIGN KEY (resource_provider_id) REFERENCES resource_providers(id),
    FOREIGN KEY (trait_id) REFERENCES traits(id)
);
CREATE INDEX rpt_trait_idx ON resource_provider_traits(trait_id);
CREATE TABLE projects (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    external_id VARCHAR(255) NOT NULL UNIQUE
);
CREATE TABLE users (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    external_id VARCHAR(255) NOT NULL UNIQUE
);
CREATE TABLE consumer_types (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(255) NOT NULL UNIQUE
);
CREATE TABLE consumers (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    uuid VARCHAR(36) NOT NULL UNIQUE,
    project_id BIGINT NOT NULL,
    user_id BIGINT NOT NULL,
    generation BIGINT NOT NULL DEFAULT 0,
    consumer_type_id BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (project_id) REFERENCES projects(id),
    FOREIGN KEY (user_id) REFERENCES users(id),
    FOREIGN KEY (consumer_type_id) REFERENCES consumer_types(id)
);
CREATE INDEX consumers_project_user_idx ON consumers(project_id, user_id);
CREATE TABLE allocations (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    resource_provider_id BIGINT NOT NULL,
    consumer_id VARCHAR(36) NOT NULL,
    resource_class_id BIGINT NOT NULL,
    used BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    FOREIGN KEY (resource_provider_id) REFERENCES resource_providers(id)
);
CREATE INDEX allocations_rp_rc_used_idx ON allocations(resource_provider_id, resource_class_id, used);
CREATE INDEX allocations_consumer_idx ON allocations(consumer_id);
CREATE INDEX allocations_rc_idx ON allocations(resource_class_id);

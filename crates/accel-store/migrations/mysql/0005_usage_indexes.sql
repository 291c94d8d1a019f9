-- Covering indexes for GET /usages: a project's consumers (with their type and uuid)
-- and each consumer's allocations (class and amount) are read from the indexes alone.
CREATE INDEX consumers_project_cover_idx ON consumers(project_id, user_id, consumer_type_id, uuid);
CREATE INDEX allocations_consumer_cover_idx ON allocations(consumer_id, resource_class_id, used);
DROP INDEX allocations_consumer_idx ON allocations;
DROP INDEX consumers_project_user_idx ON consumers;

-- ARQ lists filtered by instance and scoped by project: one index serves both
-- conditions, so a planner without statistics cannot prefer the project index.
CREATE INDEX arqs_instance_project_idx ON extended_accelerator_requests(instance_uuid, project_id);
DROP INDEX arqs_instance_idx ON extended_accelerator_requests;

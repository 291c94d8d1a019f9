-- Programming requests without an ARQ: PATCH /v2/deployables/{uuid}/program asks the
-- agent to program a deployable directly, so arq_uuid becomes optional (still unique
-- when set).
ALTER TABLE program_requests MODIFY arq_uuid VARCHAR(36) NULL;

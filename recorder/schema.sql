-- harnessproxy DuckDB schema. Filled from per-rollout journals (the ground truth); safe to re-apply.

-- One row per LLM call an agent made through its rollout's proxy, failed calls included.
CREATE TABLE IF NOT EXISTS llm_calls (
    call_id               VARCHAR PRIMARY KEY,
    rollout_id            VARCHAR NOT NULL,   -- from the listener the call arrived on, never from the request
    seq                   INTEGER NOT NULL,   -- order of arrival on that listener, from 1
    protocol              VARCHAR NOT NULL,   -- anthropic | openai_chat | openai_responses
    kind                  VARCHAR NOT NULL,   -- main | side | count_tokens | compaction | models | probe | unknown
    method                VARCHAR NOT NULL,
    path                  VARCHAR NOT NULL,   -- as the agent sent it, query included
    endpoint              VARCHAR,            -- canonical endpoint forwarded upstream
    model                 VARCHAR,            -- as requested by the agent
    stream                BOOLEAN NOT NULL,
    status                INTEGER,            -- HTTP status the agent received
    stop_reason           VARCHAR,            -- stop_reason | finish_reason | response status
    input_tokens          BIGINT,
    output_tokens         BIGINT,
    cache_read_tokens     BIGINT,
    cache_creation_tokens BIGINT,
    started_at            TIMESTAMPTZ NOT NULL,
    first_byte_ms         DOUBLE,             -- first response byte (streams: first body chunk), after start
    duration_ms           DOUBLE,
    error_kind            VARCHAR,            -- NULL when the call succeeded
    error_message         VARCHAR,
    incomplete            BOOLEAN NOT NULL,   -- the response broke off (upstream reset, client hung up)
    request_headers       JSON,               -- credentials redacted
    request_body          JSON,               -- exactly as received (NULL when it was not JSON)
    upstream_request      JSON,               -- url, headers (redacted), body when it differs from request_body
    response_body         JSON,               -- non-streaming body, or the stream reassembled into that shape
    response_events       JSON,               -- streams: every SSE event as received, unknown types included
    response_meta         JSON,               -- response headers, unknown event types, terminal event seen
    record                JSON                -- request/response parts not stored above (raw non-JSON bodies)
);

-- kernel-replay's rocpd database: the tables and views of rocprofv3's rocpd schema 3.0.4 (the
-- version whose rocpd_kernel_dispatch carries replay_pass) that a counter collection fills or
-- that those rows reference. Table and column names, constraints and foreign keys follow the
-- upstream schema; {{uuid}} suffixes the physical tables (merged databases keep them apart),
-- {{guid}} tags every row with its source, and unsuffixed views give the usual names.

PRAGMA foreign_keys = ON;

CREATE TABLE `rocpd_metadata{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "tag" TEXT NOT NULL,
    "value" TEXT NOT NULL
);

CREATE TABLE `rocpd_string{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "string" TEXT NOT NULL UNIQUE ON CONFLICT ABORT
);

CREATE TABLE `rocpd_info_node{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "hash" BIGINT NOT NULL UNIQUE,
    "machine_id" TEXT NOT NULL UNIQUE,
    "system_name" TEXT,
    "hostname" TEXT,
    "release" TEXT,
    "version" TEXT,
    "hardware_name" TEXT,
    "domain_name" TEXT
);

CREATE TABLE `rocpd_info_process{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "ppid" INTEGER,
    "pid" INTEGER NOT NULL,
    "init" BIGINT,
    "fini" BIGINT,
    "start" BIGINT,
    "end" BIGINT,
    "command" TEXT,
    "environment" JSONB NOT NULL DEFAULT '{}',
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_thread{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "ppid" INTEGER,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "tid" INTEGER NOT NULL,
    "name" TEXT,
    "start" BIGINT,
    "end" BIGINT,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_agent{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "type" TEXT CHECK ("type" IN ('CPU', 'GPU', 'NIC')),
    "absolute_index" INTEGER,
    "logical_index" INTEGER,
    "type_index" INTEGER,
    "uuid" INTEGER,
    "name" TEXT,
    "model_name" TEXT,
    "vendor_name" TEXT,
    "product_name" TEXT,
    "user_name" TEXT,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_queue{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "name" TEXT,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_stream{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "name" TEXT,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_pmc{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "agent_id" INTEGER REFERENCES `rocpd_info_agent{{uuid}}` ("id") ON UPDATE CASCADE,
    "target_arch" TEXT CHECK ("target_arch" IN ('CPU', 'GPU', 'NIC')),
    "event_code" INT,
    "instance_id" INTEGER,
    "name" TEXT NOT NULL,
    "symbol" TEXT NOT NULL,
    "description" TEXT,
    "long_description" TEXT DEFAULT '',
    "component" TEXT,
    "units" TEXT DEFAULT '',
    "value_type" TEXT CHECK ("value_type" IN ('ABS', 'ACCUM', 'RELATIVE')),
    "block" TEXT,
    "expression" TEXT,
    "is_constant" INTEGER,
    "is_derived" INTEGER,
    "spm_support" INTEGER,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_code_object{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "agent_id" INTEGER REFERENCES `rocpd_info_agent{{uuid}}` ("id") ON UPDATE CASCADE,
    "uri" TEXT,
    "load_base" BIGINT,
    "load_size" BIGINT,
    "load_delta" BIGINT,
    "storage_type" TEXT CHECK ("storage_type" IN ('FILE', 'MEMORY')),
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_info_kernel_symbol{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "code_object_id" INTEGER NOT NULL
        REFERENCES `rocpd_info_code_object{{uuid}}` ("id") ON UPDATE CASCADE,
    "kernel_name" TEXT,
    "display_name" TEXT,
    "kernel_object" INTEGER,
    "kernarg_segment_size" INTEGER,
    "kernarg_segment_alignment" INTEGER,
    "group_segment_size" INTEGER,
    "private_segment_size" INTEGER,
    "sgpr_count" INTEGER,
    "arch_vgpr_count" INTEGER,
    "accum_vgpr_count" INTEGER,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_track{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "tid" INTEGER REFERENCES `rocpd_info_thread{{uuid}}` ("id") ON UPDATE CASCADE,
    "name_id" INTEGER REFERENCES `rocpd_string{{uuid}}` ("id") ON UPDATE CASCADE,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_event{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "category_id" INTEGER REFERENCES `rocpd_string{{uuid}}` ("id") ON UPDATE CASCADE,
    "stack_id" INTEGER,
    "parent_stack_id" INTEGER,
    "correlation_id" INTEGER,
    "call_stack" JSONB NOT NULL DEFAULT '{}',
    "line_info" JSONB NOT NULL DEFAULT '{}',
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_arg{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "event_id" INTEGER NOT NULL REFERENCES `rocpd_event{{uuid}}` ("id") ON UPDATE CASCADE,
    "position" INTEGER NOT NULL,
    "type" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "value" TEXT,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

CREATE TABLE `rocpd_sample{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "track_id" INTEGER NOT NULL REFERENCES `rocpd_track{{uuid}}` ("id") ON UPDATE CASCADE,
    "timestamp" BIGINT NOT NULL,
    "event_id" INTEGER REFERENCES `rocpd_event{{uuid}}` ("id") ON UPDATE CASCADE,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

-- One row per counter value; sample_id stays NULL for dispatch counters (it is SPM's).
CREATE TABLE `rocpd_pmc_event{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "event_id" INTEGER REFERENCES `rocpd_event{{uuid}}` ("id") ON UPDATE CASCADE,
    "sample_id" INTEGER REFERENCES `rocpd_sample{{uuid}}` ("id") ON UPDATE CASCADE,
    "pmc_id" INTEGER NOT NULL REFERENCES `rocpd_info_pmc{{uuid}}` ("id") ON UPDATE CASCADE,
    "value" REAL DEFAULT 0.0,
    "xcc" INTEGER,
    "shader_engine" INTEGER,
    "instance" INTEGER,
    "extdata" JSONB DEFAULT '{}'
);

CREATE TABLE `rocpd_region{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "tid" INTEGER NOT NULL REFERENCES `rocpd_info_thread{{uuid}}` ("id") ON UPDATE CASCADE,
    "start" BIGINT NOT NULL,
    "end" BIGINT NOT NULL,
    "name_id" INTEGER NOT NULL REFERENCES `rocpd_string{{uuid}}` ("id") ON UPDATE CASCADE,
    "event_id" INTEGER REFERENCES `rocpd_event{{uuid}}` ("id") ON UPDATE CASCADE,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

-- One row per execution: a replayed dispatch has one row per pass, all with its dispatch_id,
-- told apart by replay_pass (NULL only where a run did not replay); id is a surrogate.
CREATE TABLE `rocpd_kernel_dispatch{{uuid}}` (
    "id" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "guid" TEXT NOT NULL DEFAULT '{{guid}}',
    "nid" INTEGER NOT NULL REFERENCES `rocpd_info_node{{uuid}}` ("id") ON UPDATE CASCADE,
    "pid" INTEGER NOT NULL REFERENCES `rocpd_info_process{{uuid}}` ("id") ON UPDATE CASCADE,
    "tid" INTEGER REFERENCES `rocpd_info_thread{{uuid}}` ("id") ON UPDATE CASCADE,
    "agent_id" INTEGER NOT NULL REFERENCES `rocpd_info_agent{{uuid}}` ("id") ON UPDATE CASCADE,
    "kernel_id" INTEGER NOT NULL
        REFERENCES `rocpd_info_kernel_symbol{{uuid}}` ("id") ON UPDATE CASCADE,
    "dispatch_id" INTEGER NOT NULL,
    "queue_id" INTEGER NOT NULL REFERENCES `rocpd_info_queue{{uuid}}` ("id") ON UPDATE CASCADE,
    "stream_id" INTEGER NOT NULL REFERENCES `rocpd_info_stream{{uuid}}` ("id") ON UPDATE CASCADE,
    "start" BIGINT NOT NULL,
    "end" BIGINT NOT NULL,
    "private_segment_size" INTEGER,
    "group_segment_size" INTEGER,
    "workgroup_size_x" INTEGER NOT NULL,
    "workgroup_size_y" INTEGER NOT NULL,
    "workgroup_size_z" INTEGER NOT NULL,
    "grid_size_x" INTEGER NOT NULL,
    "grid_size_y" INTEGER NOT NULL,
    "grid_size_z" INTEGER NOT NULL,
    "graph_exec_id" INTEGER NOT NULL DEFAULT 0,
    "graph_node_id" INTEGER NOT NULL DEFAULT 0,
    "region_name_id" INTEGER REFERENCES `rocpd_string{{uuid}}` ("id") ON UPDATE CASCADE,
    "event_id" INTEGER REFERENCES `rocpd_event{{uuid}}` ("id") ON UPDATE CASCADE,
    "replay_pass" INTEGER,
    "extdata" JSONB NOT NULL DEFAULT '{}'
);

-- The usual names, over this database's tables.
CREATE VIEW `rocpd_metadata` AS SELECT * FROM `rocpd_metadata{{uuid}}`;
CREATE VIEW `rocpd_string` AS SELECT * FROM `rocpd_string{{uuid}}`;
CREATE VIEW `rocpd_info_node` AS SELECT * FROM `rocpd_info_node{{uuid}}`;
CREATE VIEW `rocpd_info_process` AS SELECT * FROM `rocpd_info_process{{uuid}}`;
CREATE VIEW `rocpd_info_thread` AS SELECT * FROM `rocpd_info_thread{{uuid}}`;
CREATE VIEW `rocpd_info_agent` AS SELECT * FROM `rocpd_info_agent{{uuid}}`;
CREATE VIEW `rocpd_info_queue` AS SELECT * FROM `rocpd_info_queue{{uuid}}`;
CREATE VIEW `rocpd_info_stream` AS SELECT * FROM `rocpd_info_stream{{uuid}}`;
CREATE VIEW `rocpd_info_pmc` AS SELECT * FROM `rocpd_info_pmc{{uuid}}`;
CREATE VIEW `rocpd_info_code_object` AS SELECT * FROM `rocpd_info_code_object{{uuid}}`;
CREATE VIEW `rocpd_info_kernel_symbol` AS SELECT * FROM `rocpd_info_kernel_symbol{{uuid}}`;
CREATE VIEW `rocpd_track` AS SELECT * FROM `rocpd_track{{uuid}}`;
CREATE VIEW `rocpd_event` AS SELECT * FROM `rocpd_event{{uuid}}`;
CREATE VIEW `rocpd_arg` AS SELECT * FROM `rocpd_arg{{uuid}}`;
CREATE VIEW `rocpd_sample` AS SELECT * FROM `rocpd_sample{{uuid}}`;
CREATE VIEW `rocpd_pmc_event` AS SELECT * FROM `rocpd_pmc_event{{uuid}}`;
CREATE VIEW `rocpd_region` AS SELECT * FROM `rocpd_region{{uuid}}`;
CREATE VIEW `rocpd_kernel_dispatch` AS SELECT * FROM `rocpd_kernel_dispatch{{uuid}}`;

-- Code objects, kernel symbols, processes, threads and CPU regions (the last empty here: a
-- counter collection records none), as rocpd's readers query them.
CREATE VIEW `code_objects` AS
SELECT
    CO.id, CO.guid, CO.nid, P.pid, A.absolute_index AS agent_abs_index, CO.uri,
    CO.load_base, CO.load_size, CO.load_delta, CO.storage_type AS storage_type_str,
    JSON_EXTRACT(CO.extdata, '$.size') AS code_object_size,
    JSON_EXTRACT(CO.extdata, '$.storage_type') AS storage_type,
    JSON_EXTRACT(CO.extdata, '$.memory_base') AS memory_base,
    JSON_EXTRACT(CO.extdata, '$.memory_size') AS memory_size
FROM `rocpd_info_code_object` CO
    JOIN `rocpd_info_agent` A ON CO.agent_id = A.id AND CO.guid = A.guid
    JOIN `rocpd_info_process` P ON CO.pid = P.id AND CO.guid = P.guid;

CREATE VIEW `kernel_symbols` AS
SELECT
    KS.id, KS.guid, KS.nid, P.pid, KS.code_object_id, KS.kernel_name, KS.display_name,
    KS.kernel_object, KS.kernarg_segment_size, KS.kernarg_segment_alignment,
    KS.group_segment_size, KS.private_segment_size, KS.sgpr_count, KS.arch_vgpr_count,
    KS.accum_vgpr_count,
    JSON_EXTRACT(KS.extdata, '$.size') AS kernel_symbol_size,
    JSON_EXTRACT(KS.extdata, '$.kernel_id') AS kernel_id,
    JSON_EXTRACT(KS.extdata, '$.kernel_code_entry_byte_offset') AS kernel_code_entry_byte_offset,
    JSON_EXTRACT(KS.extdata, '$.formatted_kernel_name') AS formatted_kernel_name,
    JSON_EXTRACT(KS.extdata, '$.demangled_kernel_name') AS demangled_kernel_name,
    JSON_EXTRACT(KS.extdata, '$.truncated_kernel_name') AS truncated_kernel_name,
    JSON_EXTRACT(KS.extdata, '$.kernel_address.handle') AS kernel_address
FROM `rocpd_info_kernel_symbol` KS
    JOIN `rocpd_info_process` P ON KS.pid = P.id AND KS.guid = P.guid;

CREATE VIEW `processes` AS
SELECT
    N.id AS nid, N.machine_id, N.system_name, N.hostname, N.release AS system_release,
    N.version AS system_version, P.guid, P.ppid, P.pid, P.init, P.start, P.end, P.fini,
    P.command
FROM `rocpd_info_process` P
    JOIN `rocpd_info_node` N ON N.id = P.nid AND N.guid = P.guid;

CREATE VIEW `threads` AS
SELECT
    N.id AS nid, N.machine_id, N.system_name, N.hostname, N.release AS system_release,
    N.version AS system_version, P.guid, P.ppid, P.pid, T.tid, T.start, T.end, T.name
FROM `rocpd_info_thread` T
    JOIN `rocpd_info_process` P ON P.id = T.pid AND P.guid = T.guid
    JOIN `rocpd_info_node` N ON N.id = T.nid AND N.guid = T.guid;

CREATE VIEW `regions` AS
SELECT
    R.id, R.guid,
    (SELECT RS.string FROM `rocpd_string` RS
      WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    S.string AS name, R.nid, P.pid, T.tid, R.start, R.end, (R.end - R.start) AS duration,
    R.event_id, E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id, E.extdata,
    E.call_stack, E.line_info
FROM `rocpd_region` R
    JOIN `rocpd_event` E ON E.id = R.event_id AND E.guid = R.guid
    JOIN `rocpd_string` S ON S.id = R.name_id AND S.guid = R.guid
    JOIN `rocpd_info_process` P ON P.id = R.pid AND P.guid = R.guid
    JOIN `rocpd_info_thread` T ON T.id = R.tid AND T.guid = R.guid;

-- Kernel executions (one row per pass of a replayed dispatch).
CREATE VIEW `kernels` AS
SELECT
    K.id, K.guid, T.tid,
    (SELECT RS.string FROM `rocpd_string` RS
      WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    R.string AS region, S.display_name AS name, K.nid, P.pid,
    A.absolute_index AS agent_abs_index, A.logical_index AS agent_log_index,
    A.type_index AS agent_type_index, A.type AS agent_type,
    S.code_object_id AS code_object_id, K.kernel_id, K.dispatch_id, K.stream_id, K.queue_id,
    K.graph_exec_id, K.graph_node_id, Q.name AS queue, ST.name AS stream,
    K.start, K.end, (K.end - K.start) AS duration,
    K.grid_size_x AS grid_x, K.grid_size_y AS grid_y, K.grid_size_z AS grid_z,
    K.workgroup_size_x AS workgroup_x, K.workgroup_size_y AS workgroup_y,
    K.workgroup_size_z AS workgroup_z,
    K.group_segment_size AS lds_size, K.private_segment_size AS scratch_size,
    S.arch_vgpr_count AS vgpr_count, S.accum_vgpr_count, S.sgpr_count,
    S.group_segment_size AS static_lds_size, S.private_segment_size AS static_scratch_size,
    K.event_id, E.stack_id, E.parent_stack_id, E.correlation_id AS corr_id
FROM `rocpd_kernel_dispatch` K
    JOIN `rocpd_info_agent` A ON A.id = K.agent_id AND A.guid = K.guid
    JOIN `rocpd_event` E ON E.id = K.event_id AND E.guid = K.guid
    JOIN `rocpd_string` R ON R.id = K.region_name_id AND R.guid = K.guid
    JOIN `rocpd_info_kernel_symbol` S ON S.id = K.kernel_id AND S.guid = K.guid
    LEFT JOIN `rocpd_info_stream` ST ON ST.id = K.stream_id AND ST.guid = K.guid
    LEFT JOIN `rocpd_info_queue` Q ON Q.id = K.queue_id AND Q.guid = K.guid
    JOIN `rocpd_info_process` P ON P.id = Q.pid AND P.guid = Q.guid
    JOIN `rocpd_info_thread` T ON T.id = K.tid AND T.guid = K.guid;

CREATE VIEW `pmc_info` AS
SELECT
    PMC_I.id, PMC_I.guid, PMC_I.nid, P.pid, A.absolute_index AS agent_abs_index,
    PMC_I.is_constant, PMC_I.is_derived, PMC_I.name, PMC_I.description, PMC_I.block,
    PMC_I.expression
FROM `rocpd_info_pmc` PMC_I
    JOIN `rocpd_info_agent` A ON PMC_I.agent_id = A.id AND PMC_I.guid = A.guid
    JOIN `rocpd_info_process` P ON P.id = PMC_I.pid AND PMC_I.guid = P.guid;

CREATE VIEW `pmc_events` AS
SELECT
    PMC_E.id, PMC_E.guid, PMC_E.pmc_id, E.id AS event_id,
    (SELECT RS.string FROM `rocpd_string` RS
      WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    (SELECT KS.display_name FROM `rocpd_info_kernel_symbol` KS
      WHERE KS.id = K.kernel_id AND KS.guid = K.guid) AS name,
    K.nid, P.pid, K.dispatch_id, K.start, K.end, (K.end - K.start) AS duration,
    PMC_I.name AS counter_name, PMC_E.value AS counter_value
FROM `rocpd_pmc_event` PMC_E
    JOIN `rocpd_info_pmc` PMC_I ON PMC_I.id = PMC_E.pmc_id AND PMC_I.guid = PMC_E.guid
    JOIN `rocpd_event` E ON E.id = PMC_E.event_id AND E.guid = PMC_E.guid
    JOIN `rocpd_kernel_dispatch` K ON K.event_id = PMC_E.event_id AND K.guid = PMC_E.guid
    JOIN `rocpd_info_process` P ON P.id = K.pid AND P.guid = K.guid;

-- Counter values per execution: grouped by the execution's event (one per pass), never by
-- dispatch_id alone, so a counter that several passes collected is one row per pass.
CREATE VIEW `counters_collection` AS
SELECT
    MIN(PMC_E.id) AS id, PMC_E.guid, K.dispatch_id, K.kernel_id, E.id AS event_id,
    E.correlation_id, E.stack_id, E.parent_stack_id, P.pid, T.tid, K.agent_id,
    A.absolute_index AS agent_abs_index, A.logical_index AS agent_log_index,
    A.type_index AS agent_type_index, A.type AS agent_type, K.queue_id,
    K.grid_size_x AS grid_size_x, K.grid_size_y AS grid_size_y, K.grid_size_z AS grid_size_z,
    (K.grid_size_x * K.grid_size_y * K.grid_size_z) AS grid_size,
    KS.display_name AS kernel_name,
    (SELECT RS.string FROM `rocpd_string` RS
      WHERE RS.id = K.region_name_id AND RS.guid = K.guid) AS kernel_region,
    K.workgroup_size_x AS workgroup_size_x, K.workgroup_size_y AS workgroup_size_y,
    K.workgroup_size_z AS workgroup_size_z,
    (K.workgroup_size_x * K.workgroup_size_y * K.workgroup_size_z) AS workgroup_size,
    K.group_segment_size AS lds_block_size, K.private_segment_size AS scratch_size,
    KS.arch_vgpr_count AS vgpr_count, KS.accum_vgpr_count, KS.sgpr_count,
    PMC_I.name AS counter_name, PMC_I.symbol AS counter_symbol, PMC_I.component,
    PMC_I.description, PMC_I.block, PMC_I.expression, PMC_I.value_type,
    PMC_I.id AS counter_id, SUM(PMC_E.value) AS value, K.start, K.end,
    PMC_I.is_constant, PMC_I.is_derived, (K.end - K.start) AS duration,
    (SELECT RS.string FROM `rocpd_string` RS
      WHERE RS.id = E.category_id AND RS.guid = E.guid) AS category,
    K.nid, E.extdata, KS.code_object_id, K.replay_pass
FROM `rocpd_pmc_event` PMC_E
    JOIN `rocpd_info_pmc` PMC_I ON PMC_I.id = PMC_E.pmc_id AND PMC_I.guid = PMC_E.guid
    JOIN `rocpd_event` E ON E.id = PMC_E.event_id AND E.guid = PMC_E.guid
    JOIN `rocpd_kernel_dispatch` K ON K.event_id = PMC_E.event_id AND K.guid = PMC_E.guid
    JOIN `rocpd_info_agent` A ON A.id = K.agent_id AND A.guid = K.guid
    JOIN `rocpd_info_kernel_symbol` KS ON KS.id = K.kernel_id AND KS.guid = K.guid
    JOIN `rocpd_info_process` P ON P.id = K.pid AND P.guid = K.guid
    JOIN `rocpd_info_thread` T ON T.id = K.tid AND T.guid = K.guid
WHERE PMC_E.sample_id IS NULL
GROUP BY PMC_E.guid, E.id, PMC_I.name, K.agent_id;

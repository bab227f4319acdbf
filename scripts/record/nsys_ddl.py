"""The tables the SYNTHETIC GPU layers add (scripts/record/synthetic_gpu.py and its users), with
the column names, types and constraints a real Nsight Systems 2026.2 export declares (only the
DDL; no rows are taken from any other file), and the label table that says the rows are made up."""

from __future__ import annotations

# Column names, types and constraints as a real Nsight Systems 2026.2 export declares them.
DDL = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": """CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    eventClass                  INTEGER   NOT NULL,
    globalTid                   INTEGER,
    correlationId               INTEGER,
    nameId                      INTEGER   NOT NULL,
    returnValue                 INTEGER   NOT NULL,
    callchainId                 INTEGER
)""",
    "CUPTI_ACTIVITY_KIND_KERNEL": """CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    deviceId                    INTEGER   NOT NULL,
    contextId                   INTEGER   NOT NULL,
    greenContextId              INTEGER,
    streamId                    INTEGER   NOT NULL,
    correlationId               INTEGER,
    globalPid                   INTEGER,
    demangledName               INTEGER   NOT NULL,
    shortName                   INTEGER   NOT NULL,
    mangledName                 INTEGER,
    launchType                  INTEGER,
    cacheConfig                 INTEGER,
    registersPerThread          INTEGER   NOT NULL,
    gridX                       INTEGER   NOT NULL,
    gridY                       INTEGER   NOT NULL,
    gridZ                       INTEGER   NOT NULL,
    blockX                      INTEGER   NOT NULL,
    blockY                      INTEGER   NOT NULL,
    blockZ                      INTEGER   NOT NULL,
    staticSharedMemory          INTEGER   NOT NULL,
    dynamicSharedMemory         INTEGER   NOT NULL,
    localMemoryPerThread        INTEGER   NOT NULL,
    localMemoryTotal            INTEGER   NOT NULL,
    gridId                      INTEGER   NOT NULL,
    sharedMemoryExecuted        INTEGER,
    graphNodeId                 INTEGER,
    sharedMemoryLimitConfig     INTEGER,
    qmdBulkReleaseDone          INTEGER,
    qmdPreexitDone              INTEGER,
    qmdLastCtaDone              INTEGER,
    graphId                     INTEGER,
    clusterX                    INTEGER,
    clusterY                    INTEGER,
    clusterZ                    INTEGER,
    clusterSchedulingPolicy     INTEGER,
    maxPotentialClusterSize     INTEGER,
    maxActiveClusters           INTEGER,
    sharedMemoryRequestedPercentage   INTEGER,
    tensorSizeMinusOneElements   TEXT      NOT NULL
)""",
    "CUPTI_ACTIVITY_KIND_MEMCPY": """CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,
    end                         INTEGER   NOT NULL,
    deviceId                    INTEGER   NOT NULL,
    contextId                   INTEGER   NOT NULL,
    greenContextId              INTEGER,
    streamId                    INTEGER   NOT NULL,
    correlationId               INTEGER,
    globalPid                   INTEGER,
    bytes                       INTEGER   NOT NULL,
    copyKind                    INTEGER   NOT NULL,
    deprecatedSrcId             INTEGER,
    srcKind                     INTEGER,
    dstKind                     INTEGER,
    srcDeviceId                 INTEGER,
    srcContextId                INTEGER,
    dstDeviceId                 INTEGER,
    dstContextId                INTEGER,
    migrationCause              INTEGER,
    graphNodeId                 INTEGER,
    virtualAddress              INTEGER,
    copyCount                   INTEGER
)""",
    "NVBRIDGE_SYNTHETIC": """CREATE TABLE NVBRIDGE_SYNTHETIC (
    name                        TEXT      NOT NULL   PRIMARY KEY,
    value                       TEXT      NOT NULL
)""",
}

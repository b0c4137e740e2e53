from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StepClock(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_CLOCK_UNSPECIFIED: _ClassVar[StepClock]
    STEP_CLOCK_HOST: _ClassVar[StepClock]
    STEP_CLOCK_CUDA_EVENT: _ClassVar[StepClock]
STEP_CLOCK_UNSPECIFIED: StepClock
STEP_CLOCK_HOST: StepClock
STEP_CLOCK_CUDA_EVENT: StepClock

class AgentMessage(_message.Message):
    __slots__ = ("hello", "batch")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    batch: Batch
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("job", "rank", "local_rank", "world_size", "host", "pid", "session_id", "gpu", "torch_version", "cuda_version", "driver_version", "agent_version", "config", "attach_time_s")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    CUDA_VERSION_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ATTACH_TIME_S_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    local_rank: int
    world_size: int
    host: str
    pid: int
    session_id: str
    gpu: GpuIdentity
    torch_version: str
    cuda_version: str
    driver_version: str
    agent_version: str
    config: _containers.ScalarMap[str, str]
    attach_time_s: float
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., session_id: _Optional[str] = ..., gpu: _Optional[_Union[GpuIdentity, _Mapping]] = ..., torch_version: _Optional[str] = ..., cuda_version: _Optional[str] = ..., driver_version: _Optional[str] = ..., agent_version: _Optional[str] = ..., config: _Optional[_Mapping[str, str]] = ..., attach_time_s: _Optional[float] = ...) -> None: ...

class GpuIdentity(_message.Message):
    __slots__ = ("index", "uuid", "name", "total_memory_bytes")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    total_memory_bytes: int
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., total_memory_bytes: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("seq", "gpu", "steps", "allocator", "gpu_samples", "host", "events", "stats", "sealed_time_s", "windows", "traces", "phase_times")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATOR_FIELD_NUMBER: _ClassVar[int]
    GPU_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    SEALED_TIME_S_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    TRACES_FIELD_NUMBER: _ClassVar[int]
    PHASE_TIMES_FIELD_NUMBER: _ClassVar[int]
    seq: int
    gpu: GpuIdentity
    steps: _containers.RepeatedCompositeFieldContainer[StepRecord]
    allocator: _containers.RepeatedCompositeFieldContainer[AllocatorSample]
    gpu_samples: _containers.RepeatedCompositeFieldContainer[GpuSample]
    host: _containers.RepeatedCompositeFieldContainer[HostSample]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    stats: AgentStats
    sealed_time_s: float
    windows: _containers.RepeatedCompositeFieldContainer[WindowSummary]
    traces: _containers.RepeatedCompositeFieldContainer[TraceRef]
    phase_times: _containers.RepeatedCompositeFieldContainer[StepPhaseTimes]
    def __init__(self, seq: _Optional[int] = ..., gpu: _Optional[_Union[GpuIdentity, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[StepRecord, _Mapping]]] = ..., allocator: _Optional[_Iterable[_Union[AllocatorSample, _Mapping]]] = ..., gpu_samples: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., host: _Optional[_Iterable[_Union[HostSample, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., stats: _Optional[_Union[AgentStats, _Mapping]] = ..., sealed_time_s: _Optional[float] = ..., windows: _Optional[_Iterable[_Union[WindowSummary, _Mapping]]] = ..., traces: _Optional[_Iterable[_Union[TraceRef, _Mapping]]] = ..., phase_times: _Optional[_Iterable[_Union[StepPhaseTimes, _Mapping]]] = ...) -> None: ...

class StepRecord(_message.Message):
    __slots__ = ("step", "end_time_s", "duration_s", "clock", "dataloader_wait_s", "samples", "tokens", "profiled", "phase")
    STEP_FIELD_NUMBER: _ClassVar[int]
    END_TIME_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    DATALOADER_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROFILED_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    step: int
    end_time_s: float
    duration_s: float
    clock: StepClock
    dataloader_wait_s: float
    samples: int
    tokens: int
    profiled: bool
    phase: str
    def __init__(self, step: _Optional[int] = ..., end_time_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., clock: _Optional[_Union[StepClock, str]] = ..., dataloader_wait_s: _Optional[float] = ..., samples: _Optional[int] = ..., tokens: _Optional[int] = ..., profiled: bool = ..., phase: _Optional[str] = ...) -> None: ...

class StepPhaseTimes(_message.Message):
    __slots__ = ("step", "end_time_s", "clock", "data_s", "forward_s", "backward_s", "sync_s", "optimizer_s", "host_data_s", "host_forward_s", "host_backward_s", "host_sync_s", "host_optimizer_s", "points")
    STEP_FIELD_NUMBER: _ClassVar[int]
    END_TIME_S_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    DATA_S_FIELD_NUMBER: _ClassVar[int]
    FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_S_FIELD_NUMBER: _ClassVar[int]
    SYNC_S_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_S_FIELD_NUMBER: _ClassVar[int]
    HOST_DATA_S_FIELD_NUMBER: _ClassVar[int]
    HOST_FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    HOST_BACKWARD_S_FIELD_NUMBER: _ClassVar[int]
    HOST_SYNC_S_FIELD_NUMBER: _ClassVar[int]
    HOST_OPTIMIZER_S_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    step: int
    end_time_s: float
    clock: StepClock
    data_s: float
    forward_s: float
    backward_s: float
    sync_s: float
    optimizer_s: float
    host_data_s: float
    host_forward_s: float
    host_backward_s: float
    host_sync_s: float
    host_optimizer_s: float
    points: int
    def __init__(self, step: _Optional[int] = ..., end_time_s: _Optional[float] = ..., clock: _Optional[_Union[StepClock, str]] = ..., data_s: _Optional[float] = ..., forward_s: _Optional[float] = ..., backward_s: _Optional[float] = ..., sync_s: _Optional[float] = ..., optimizer_s: _Optional[float] = ..., host_data_s: _Optional[float] = ..., host_forward_s: _Optional[float] = ..., host_backward_s: _Optional[float] = ..., host_sync_s: _Optional[float] = ..., host_optimizer_s: _Optional[float] = ..., points: _Optional[int] = ...) -> None: ...

class AllocatorSample(_message.Message):
    __slots__ = ("time_s", "device", "allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "alloc_retries", "ooms", "allocated_peak_bytes", "reserved_peak_bytes", "device_total_bytes", "device_allocs", "device_frees")
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    INACTIVE_SPLIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALLOC_RETRIES_FIELD_NUMBER: _ClassVar[int]
    OOMS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVED_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ALLOCS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FREES_FIELD_NUMBER: _ClassVar[int]
    time_s: float
    device: int
    allocated_bytes: int
    reserved_bytes: int
    active_bytes: int
    inactive_split_bytes: int
    alloc_retries: int
    ooms: int
    allocated_peak_bytes: int
    reserved_peak_bytes: int
    device_total_bytes: int
    device_allocs: int
    device_frees: int
    def __init__(self, time_s: _Optional[float] = ..., device: _Optional[int] = ..., allocated_bytes: _Optional[int] = ..., reserved_bytes: _Optional[int] = ..., active_bytes: _Optional[int] = ..., inactive_split_bytes: _Optional[int] = ..., alloc_retries: _Optional[int] = ..., ooms: _Optional[int] = ..., allocated_peak_bytes: _Optional[int] = ..., reserved_peak_bytes: _Optional[int] = ..., device_total_bytes: _Optional[int] = ..., device_allocs: _Optional[int] = ..., device_frees: _Optional[int] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("time_s", "utilization_ratio", "memory_utilization_ratio", "memory_used_bytes", "memory_total_bytes", "power_watts", "energy_joules", "temperature_celsius", "sm_clock_hertz", "memory_clock_hertz", "clock_event_reasons", "ecc_corrected_errors", "ecc_uncorrected_errors", "sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio", "tensor_hmma_active_ratio", "tensor_imma_active_ratio", "tensor_dmma_active_ratio", "fp16_active_ratio", "fp32_active_ratio", "fp64_active_ratio", "dram_active_ratio", "pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    MEMORY_UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    POWER_WATTS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_JOULES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_CELSIUS_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_HERTZ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CLOCK_HERTZ_FIELD_NUMBER: _ClassVar[int]
    CLOCK_EVENT_REASONS_FIELD_NUMBER: _ClassVar[int]
    ECC_CORRECTED_ERRORS_FIELD_NUMBER: _ClassVar[int]
    ECC_UNCORRECTED_ERRORS_FIELD_NUMBER: _ClassVar[int]
    SM_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    SM_OCCUPANCY_RATIO_FIELD_NUMBER: _ClassVar[int]
    TENSOR_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    TENSOR_HMMA_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    TENSOR_IMMA_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    TENSOR_DMMA_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    FP16_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    FP32_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    FP64_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    DRAM_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    NVLINK_TX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    time_s: float
    utilization_ratio: float
    memory_utilization_ratio: float
    memory_used_bytes: int
    memory_total_bytes: int
    power_watts: float
    energy_joules: float
    temperature_celsius: float
    sm_clock_hertz: float
    memory_clock_hertz: float
    clock_event_reasons: int
    ecc_corrected_errors: int
    ecc_uncorrected_errors: int
    sm_active_ratio: float
    sm_occupancy_ratio: float
    tensor_active_ratio: float
    tensor_hmma_active_ratio: float
    tensor_imma_active_ratio: float
    tensor_dmma_active_ratio: float
    fp16_active_ratio: float
    fp32_active_ratio: float
    fp64_active_ratio: float
    dram_active_ratio: float
    pcie_tx_bytes_per_second: float
    pcie_rx_bytes_per_second: float
    nvlink_tx_bytes_per_second: float
    nvlink_rx_bytes_per_second: float
    def __init__(self, time_s: _Optional[float] = ..., utilization_ratio: _Optional[float] = ..., memory_utilization_ratio: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., power_watts: _Optional[float] = ..., energy_joules: _Optional[float] = ..., temperature_celsius: _Optional[float] = ..., sm_clock_hertz: _Optional[float] = ..., memory_clock_hertz: _Optional[float] = ..., clock_event_reasons: _Optional[int] = ..., ecc_corrected_errors: _Optional[int] = ..., ecc_uncorrected_errors: _Optional[int] = ..., sm_active_ratio: _Optional[float] = ..., sm_occupancy_ratio: _Optional[float] = ..., tensor_active_ratio: _Optional[float] = ..., tensor_hmma_active_ratio: _Optional[float] = ..., tensor_imma_active_ratio: _Optional[float] = ..., tensor_dmma_active_ratio: _Optional[float] = ..., fp16_active_ratio: _Optional[float] = ..., fp32_active_ratio: _Optional[float] = ..., fp64_active_ratio: _Optional[float] = ..., dram_active_ratio: _Optional[float] = ..., pcie_tx_bytes_per_second: _Optional[float] = ..., pcie_rx_bytes_per_second: _Optional[float] = ..., nvlink_tx_bytes_per_second: _Optional[float] = ..., nvlink_rx_bytes_per_second: _Optional[float] = ...) -> None: ...

class HostSample(_message.Message):
    __slots__ = ("time_s", "cpu_seconds", "resident_memory_bytes", "threads", "children", "io_read_bytes", "io_write_bytes", "host_memory_available_bytes")
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    IO_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HOST_MEMORY_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    time_s: float
    cpu_seconds: float
    resident_memory_bytes: int
    threads: int
    children: int
    io_read_bytes: int
    io_write_bytes: int
    host_memory_available_bytes: int
    def __init__(self, time_s: _Optional[float] = ..., cpu_seconds: _Optional[float] = ..., resident_memory_bytes: _Optional[int] = ..., threads: _Optional[int] = ..., children: _Optional[int] = ..., io_read_bytes: _Optional[int] = ..., io_write_bytes: _Optional[int] = ..., host_memory_available_bytes: _Optional[int] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("time_s", "kind", "message")
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    time_s: float
    kind: str
    message: str
    def __init__(self, time_s: _Optional[float] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class AgentStats(_message.Message):
    __slots__ = ("records_dropped", "hook_errors", "spool_batches_dropped", "spool_bytes", "windows", "window_skips", "overhead_ratio", "window_warmup_s", "window_aftereffect_ratio")
    class WindowSkipsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RECORDS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    HOOK_ERRORS_FIELD_NUMBER: _ClassVar[int]
    SPOOL_BATCHES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    SPOOL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SKIPS_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_RATIO_FIELD_NUMBER: _ClassVar[int]
    WINDOW_WARMUP_S_FIELD_NUMBER: _ClassVar[int]
    WINDOW_AFTEREFFECT_RATIO_FIELD_NUMBER: _ClassVar[int]
    records_dropped: int
    hook_errors: int
    spool_batches_dropped: int
    spool_bytes: int
    windows: int
    window_skips: _containers.ScalarMap[str, int]
    overhead_ratio: float
    window_warmup_s: float
    window_aftereffect_ratio: float
    def __init__(self, records_dropped: _Optional[int] = ..., hook_errors: _Optional[int] = ..., spool_batches_dropped: _Optional[int] = ..., spool_bytes: _Optional[int] = ..., windows: _Optional[int] = ..., window_skips: _Optional[_Mapping[str, int]] = ..., overhead_ratio: _Optional[float] = ..., window_warmup_s: _Optional[float] = ..., window_aftereffect_ratio: _Optional[float] = ...) -> None: ...

class NamedTime(_message.Message):
    __slots__ = ("name", "seconds", "count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    seconds: float
    count: int
    def __init__(self, name: _Optional[str] = ..., seconds: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class StepBreakdown(_message.Message):
    __slots__ = ("step_time_s", "forward_s", "backward_s", "optimizer_s", "communication_s", "other_s", "forward_gpu_s", "backward_gpu_s", "optimizer_gpu_s")
    STEP_TIME_S_FIELD_NUMBER: _ClassVar[int]
    FORWARD_S_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_S_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_S_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_S_FIELD_NUMBER: _ClassVar[int]
    OTHER_S_FIELD_NUMBER: _ClassVar[int]
    FORWARD_GPU_S_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_GPU_S_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_GPU_S_FIELD_NUMBER: _ClassVar[int]
    step_time_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float
    other_s: float
    forward_gpu_s: float
    backward_gpu_s: float
    optimizer_gpu_s: float
    def __init__(self, step_time_s: _Optional[float] = ..., forward_s: _Optional[float] = ..., backward_s: _Optional[float] = ..., optimizer_s: _Optional[float] = ..., communication_s: _Optional[float] = ..., other_s: _Optional[float] = ..., forward_gpu_s: _Optional[float] = ..., backward_gpu_s: _Optional[float] = ..., optimizer_gpu_s: _Optional[float] = ...) -> None: ...

class WindowSummary(_message.Message):
    __slots__ = ("window_id", "first_step", "last_step", "start_time_s", "activities", "span_s", "gpu_busy_ratio", "gpu_idle_ratio", "compute_s", "communication_s", "memcpy_s", "overlap_ratio", "kernel_count", "short_kernel_ratio", "top_kernels", "top_ops", "breakdown", "overhead_s", "export_s", "trace_bytes", "analysis_s", "gpu_event_count", "graph_breaks", "recompiles")
    WINDOW_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    START_TIME_S_FIELD_NUMBER: _ClassVar[int]
    ACTIVITIES_FIELD_NUMBER: _ClassVar[int]
    SPAN_S_FIELD_NUMBER: _ClassVar[int]
    GPU_BUSY_RATIO_FIELD_NUMBER: _ClassVar[int]
    GPU_IDLE_RATIO_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_S_FIELD_NUMBER: _ClassVar[int]
    MEMCPY_S_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_RATIO_FIELD_NUMBER: _ClassVar[int]
    KERNEL_COUNT_FIELD_NUMBER: _ClassVar[int]
    SHORT_KERNEL_RATIO_FIELD_NUMBER: _ClassVar[int]
    TOP_KERNELS_FIELD_NUMBER: _ClassVar[int]
    TOP_OPS_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    OVERHEAD_S_FIELD_NUMBER: _ClassVar[int]
    EXPORT_S_FIELD_NUMBER: _ClassVar[int]
    TRACE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ANALYSIS_S_FIELD_NUMBER: _ClassVar[int]
    GPU_EVENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    GRAPH_BREAKS_FIELD_NUMBER: _ClassVar[int]
    RECOMPILES_FIELD_NUMBER: _ClassVar[int]
    window_id: int
    first_step: int
    last_step: int
    start_time_s: float
    activities: str
    span_s: float
    gpu_busy_ratio: float
    gpu_idle_ratio: float
    compute_s: float
    communication_s: float
    memcpy_s: float
    overlap_ratio: float
    kernel_count: int
    short_kernel_ratio: float
    top_kernels: _containers.RepeatedCompositeFieldContainer[NamedTime]
    top_ops: _containers.RepeatedCompositeFieldContainer[NamedTime]
    breakdown: StepBreakdown
    overhead_s: float
    export_s: float
    trace_bytes: int
    analysis_s: float
    gpu_event_count: int
    graph_breaks: int
    recompiles: int
    def __init__(self, window_id: _Optional[int] = ..., first_step: _Optional[int] = ..., last_step: _Optional[int] = ..., start_time_s: _Optional[float] = ..., activities: _Optional[str] = ..., span_s: _Optional[float] = ..., gpu_busy_ratio: _Optional[float] = ..., gpu_idle_ratio: _Optional[float] = ..., compute_s: _Optional[float] = ..., communication_s: _Optional[float] = ..., memcpy_s: _Optional[float] = ..., overlap_ratio: _Optional[float] = ..., kernel_count: _Optional[int] = ..., short_kernel_ratio: _Optional[float] = ..., top_kernels: _Optional[_Iterable[_Union[NamedTime, _Mapping]]] = ..., top_ops: _Optional[_Iterable[_Union[NamedTime, _Mapping]]] = ..., breakdown: _Optional[_Union[StepBreakdown, _Mapping]] = ..., overhead_s: _Optional[float] = ..., export_s: _Optional[float] = ..., trace_bytes: _Optional[int] = ..., analysis_s: _Optional[float] = ..., gpu_event_count: _Optional[int] = ..., graph_breaks: _Optional[int] = ..., recompiles: _Optional[int] = ...) -> None: ...

class TraceRef(_message.Message):
    __slots__ = ("request_id", "path", "bytes", "first_step", "last_step", "error", "trace_id", "upload_error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    path: str
    bytes: int
    first_step: int
    last_step: int
    error: str
    trace_id: str
    upload_error: str
    def __init__(self, request_id: _Optional[str] = ..., path: _Optional[str] = ..., bytes: _Optional[int] = ..., first_step: _Optional[int] = ..., last_step: _Optional[int] = ..., error: _Optional[str] = ..., trace_id: _Optional[str] = ..., upload_error: _Optional[str] = ...) -> None: ...

class TraceChunk(_message.Message):
    __slots__ = ("job", "rank", "request_id", "total_bytes", "data")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    request_id: str
    total_bytes: int
    data: bytes
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., request_id: _Optional[str] = ..., total_bytes: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class TraceStored(_message.Message):
    __slots__ = ("trace_id", "bytes")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    bytes: int
    def __init__(self, trace_id: _Optional[str] = ..., bytes: _Optional[int] = ...) -> None: ...

class TraceId(_message.Message):
    __slots__ = ("trace_id",)
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    trace_id: str
    def __init__(self, trace_id: _Optional[str] = ...) -> None: ...

class Command(_message.Message):
    __slots__ = ("ack", "capture_trace", "window_now")
    ACK_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_TRACE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_NOW_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    capture_trace: CaptureTrace
    window_now: WindowNow
    def __init__(self, ack: _Optional[_Union[Ack, _Mapping]] = ..., capture_trace: _Optional[_Union[CaptureTrace, _Mapping]] = ..., window_now: _Optional[_Union[WindowNow, _Mapping]] = ...) -> None: ...

class WindowNow(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "batch_interval_ask_s")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    BATCH_INTERVAL_ASK_S_FIELD_NUMBER: _ClassVar[int]
    seq: int
    batch_interval_ask_s: float
    def __init__(self, seq: _Optional[int] = ..., batch_interval_ask_s: _Optional[float] = ...) -> None: ...

class CaptureTrace(_message.Message):
    __slots__ = ("request_id", "steps")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    steps: int
    def __init__(self, request_id: _Optional[str] = ..., steps: _Optional[int] = ...) -> None: ...

class CaptureRequest(_message.Message):
    __slots__ = ("job", "ranks", "steps", "timeout_s")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    job: str
    ranks: _containers.RepeatedScalarFieldContainer[int]
    steps: int
    timeout_s: float
    def __init__(self, job: _Optional[str] = ..., ranks: _Optional[_Iterable[int]] = ..., steps: _Optional[int] = ..., timeout_s: _Optional[float] = ...) -> None: ...

class CaptureReply(_message.Message):
    __slots__ = ("request_id", "traces")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TRACES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    traces: _containers.RepeatedCompositeFieldContainer[RankTrace]
    def __init__(self, request_id: _Optional[str] = ..., traces: _Optional[_Iterable[_Union[RankTrace, _Mapping]]] = ...) -> None: ...

class RankTrace(_message.Message):
    __slots__ = ("rank", "host", "trace")
    RANK_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    host: str
    trace: TraceRef
    def __init__(self, rank: _Optional[int] = ..., host: _Optional[str] = ..., trace: _Optional[_Union[TraceRef, _Mapping]] = ...) -> None: ...

//! Raw CUPTI profiler bindings, loaded at run time: the parameter structs of
//! `cupti_target.h`, `cupti_profiler_target.h`, `cupti_profiler_host.h`,
//! `cupti_range_profiler.h` and `cupti_sass_metrics.h` (CUDA 13.0, CUPTI 2025.3.1), and the
//! library with its entries.
//!
//! The SASS Metrics API (CUDA 12.5 and later) is bound apart ([`SassEntries`]): a libcupti
//! without it still serves the range profiler, and the error that names the missing entry is
//! given only when a SASS metric is asked for.
//!
//! The structs are copied from those headers field for field (their layouts are checked
//! against cudarc's generated bindings in the tests below). Each `structSize` is the
//! headers' `CUPTI_PROFILER_STRUCT_SIZE(type, lastfield)`: the offset of the last field plus
//! its size, without tail padding (`struct_size!`).
//!
//! cudarc's own CUPTI loader panics when the library is missing; this one returns
//! [`LibraryMissing`](super::LibraryMissing), naming the library and every place it looked.

#![allow(non_snake_case, missing_docs)]

use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;

use super::plan::{CounterError, LibraryMissing};

/// `CUptiResult`: 0 is success.
pub type CuptiResult = c_int;
/// `CUPTI_ERROR_INVALID_METRIC_NAME`.
pub const CUPTI_ERROR_INVALID_METRIC_NAME: CuptiResult = 17;
/// `CUPTI_PROFILER_TYPE_RANGE_PROFILER`.
pub const PROFILER_TYPE_RANGE: u32 = 0;
/// `CUPTI_AutoRange`.
pub const AUTO_RANGE: u32 = 1;
/// `CUPTI_UserReplay`.
pub const USER_REPLAY: u32 = 3;
/// `CUPTI_SASS_METRICS_OUTPUT_GRANULARITY_GPU`: one instance per record.
pub const SASS_GRANULARITY_GPU: u8 = 0;

/// `CUPTI_PROFILER_STRUCT_SIZE(type, field)`.
macro_rules! struct_size {
    ($t:ty, $f:ident) => {{
        const fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
            std::mem::size_of::<F>()
        }
        std::mem::offset_of!($t, $f) + field_size(|s: &$t| &s.$f)
    }};
}
pub(crate) use struct_size;

macro_rules! params {
    ($(#[$m:meta])* $name:ident { $($field:ident : $ty:ty),* $(,)? } last $last:ident) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug)]
        pub struct $name {
            pub structSize: usize,
            pub pPriv: *mut c_void,
            $(pub $field: $ty,)*
        }
        impl Default for $name {
            fn default() -> Self {
                // SAFETY: every field is an integer or a raw pointer, for which all-zero is a
                // valid value (null pointers, zero counts), as the C API expects before use.
                let mut s: Self = unsafe { std::mem::zeroed() };
                s.structSize = struct_size!($name, $last);
                s
            }
        }
    };
}

params!(
    /// `CUpti_Profiler_Initialize_Params`.
    ProfilerInitialize {} last pPriv
);
params!(
    /// `CUpti_Device_GetChipName_Params`.
    DeviceGetChipName { deviceIndex: usize, pChipName: *const c_char } last pChipName
);
params!(
    /// `CUpti_Profiler_Host_Initialize_Params`.
    HostInitialize {
        profilerType: u32,
        pChipName: *const c_char,
        pCounterAvailabilityImage: *const u8,
        pHostObject: *mut c_void,
    } last pHostObject
);
params!(
    /// `CUpti_Profiler_Host_Deinitialize_Params`.
    HostDeinitialize { pHostObject: *mut c_void } last pHostObject
);
params!(
    /// `CUpti_Profiler_Host_GetMetricProperties_Params`.
    HostGetMetricProperties {
        pHostObject: *mut c_void,
        pMetricName: *const c_char,
        pDescription: *const c_char,
        pHwUnit: *const c_char,
        pDimUnit: *const c_char,
        metricType: u32,
    } last metricType
);
params!(
    /// `CUpti_Profiler_Host_EvaluateToGpuValues_Params`.
    HostEvaluateToGpuValues {
        pHostObject: *mut c_void,
        pCounterDataImage: *const u8,
        counterDataImageSize: usize,
        rangeIndex: usize,
        ppMetricNames: *mut *const c_char,
        numMetrics: usize,
        pMetricValues: *mut f64,
    } last pMetricValues
);
params!(
    /// `CUpti_Profiler_Host_ConfigAddMetrics_Params`.
    HostConfigAddMetrics {
        pHostObject: *mut c_void,
        ppMetricNames: *mut *const c_char,
        numMetrics: usize,
    } last numMetrics
);
params!(
    /// `CUpti_Profiler_Host_GetConfigImageSize_Params`.
    HostGetConfigImageSize { pHostObject: *mut c_void, configImageSize: usize } last configImageSize
);
params!(
    /// `CUpti_Profiler_Host_GetConfigImage_Params`.
    HostGetConfigImage {
        pHostObject: *mut c_void,
        configImageSize: usize,
        pConfigImage: *mut u8,
    } last pConfigImage
);
params!(
    /// `CUpti_Profiler_Host_GetNumOfPasses_Params`.
    HostGetNumOfPasses {
        configImageSize: usize,
        pConfigImage: *mut u8,
        numOfPasses: usize,
    } last numOfPasses
);
params!(
    /// `CUpti_RangeProfiler_SetConfig_Params`.
    RangeSetConfig {
        pRangeProfilerObject: *mut c_void,
        configSize: usize,
        pConfig: *const u8,
        counterDataImageSize: usize,
        pCounterDataImage: *mut u8,
        range: u32,
        replayMode: u32,
        maxRangesPerPass: usize,
        numNestingLevels: u16,
        minNestingLevel: u16,
        passIndex: usize,
        targetNestingLevel: u16,
    } last targetNestingLevel
);
params!(
    /// `CUpti_RangeProfiler_Enable_Params`.
    RangeEnable { ctx: *mut c_void, pRangeProfilerObject: *mut c_void } last pRangeProfilerObject
);
params!(
    /// `CUpti_RangeProfiler_Disable_Params`; also the layout of `Start_Params`.
    RangeObject { pRangeProfilerObject: *mut c_void } last pRangeProfilerObject
);
params!(
    /// `CUpti_RangeProfiler_Stop_Params`.
    RangeStop {
        pRangeProfilerObject: *mut c_void,
        passIndex: usize,
        targetNestingLevel: usize,
        isAllPassSubmitted: u8,
    } last isAllPassSubmitted
);
params!(
    /// `CUpti_RangeProfiler_DecodeData_Params`.
    RangeDecode { pRangeProfilerObject: *mut c_void, numOfRangeDropped: usize } last numOfRangeDropped
);
params!(
    /// `CUpti_RangeProfiler_GetCounterDataSize_Params`.
    RangeCounterDataSize {
        pRangeProfilerObject: *mut c_void,
        pMetricNames: *mut *const c_char,
        numMetrics: usize,
        maxNumOfRanges: usize,
        maxNumRangeTreeNodes: u32,
        counterDataSize: usize,
    } last counterDataSize
);
params!(
    /// `CUpti_RangeProfiler_CounterDataImage_Initialize_Params`.
    RangeCounterDataInit {
        pRangeProfilerObject: *mut c_void,
        counterDataSize: usize,
        pCounterData: *mut u8,
    } last pCounterData
);
params!(
    /// `CUpti_RangeProfiler_GetCounterDataInfo_Params`.
    RangeCounterDataInfo {
        pCounterDataImage: *const u8,
        counterDataImageSize: usize,
        numTotalRanges: usize,
    } last numTotalRanges
);

/// `CUpti_SassMetrics_MetricDetails`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SassMetricDetails {
    pub metricId: u64,
    pub pMetricName: *const c_char,
    pub pMetricDescription: *const c_char,
}

/// `CUpti_SassMetrics_Config`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SassMetricConfig {
    pub metricId: u64,
    pub outputGranularity: u8,
}

/// `CUpti_SassMetrics_InstanceValue`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SassInstanceValue {
    pub metricId: u64,
    pub value: u64,
}

/// `CUpti_SassMetrics_Data`: one record (a patched instruction of a function). CUPTI writes
/// the function name, which the caller frees (`free`), and `numOfInstances` values into
/// `pInstanceValues`, which the caller allocates.
#[repr(C)]
#[derive(Debug)]
pub struct SassData {
    pub structSize: usize,
    pub pPriv: *mut c_void,
    pub cubinCrc: u32,
    pub functionIndex: u32,
    pub functionName: *const c_char,
    pub pcOffset: u32,
    pub pInstanceValues: *mut SassInstanceValue,
}

impl Default for SassData {
    fn default() -> Self {
        Self {
            // The header asks for a size without naming its macro for this struct; the size
            // of the struct is what every user passes.
            structSize: std::mem::size_of::<Self>(),
            pPriv: std::ptr::null_mut(),
            cubinCrc: 0,
            functionIndex: 0,
            functionName: std::ptr::null(),
            pcOffset: 0,
            pInstanceValues: std::ptr::null_mut(),
        }
    }
}

params!(
    /// `CUpti_SassMetrics_GetNumOfMetrics_Params`.
    SassGetNumOfMetrics { pChipName: *const c_char, numOfMetrics: usize } last numOfMetrics
);
params!(
    /// `CUpti_SassMetrics_GetMetrics_Params`.
    SassGetMetrics {
        pChipName: *const c_char,
        numOfMetrics: usize,
        pMetricsList: *mut SassMetricDetails,
    } last pMetricsList
);
params!(
    /// `CUpti_SassMetrics_GetProperties_Params`.
    SassGetProperties {
        pChipName: *const c_char,
        pMetricName: *const c_char,
        metric: SassMetricDetails,
    } last metric
);
params!(
    /// `CUpti_SassMetricsSetConfig_Params`.
    SassSetConfig {
        numOfMetricConfig: usize,
        pConfigs: *mut SassMetricConfig,
        deviceIndex: u32,
    } last deviceIndex
);
params!(
    /// `CUpti_SassMetricsUnsetConfig_Params`.
    SassUnsetConfig { deviceIndex: u32 } last deviceIndex
);
params!(
    /// `CUpti_SassMetricsEnable_Params`.
    SassEnable { ctx: *mut c_void, enableLazyPatching: u8 } last enableLazyPatching
);
params!(
    /// `CUpti_SassMetricsDisable_Params`.
    SassDisable { ctx: *mut c_void, numOfDroppedRecords: usize } last numOfDroppedRecords
);
params!(
    /// `CUpti_SassMetricsGetDataProperties_Params`.
    SassGetDataProperties {
        ctx: *mut c_void,
        numOfPatchedInstructionRecords: usize,
        numOfInstances: usize,
    } last numOfInstances
);
params!(
    /// `CUpti_SassMetricsFlushData_Params`. The header's size macro ends at `numOfInstances`
    /// (the output pointer after it is not counted), and so does this one.
    SassFlushData {
        ctx: *mut c_void,
        numOfPatchedInstructionRecords: usize,
        numOfInstances: usize,
        pMetricsData: *mut SassData,
    } last numOfInstances
);

type Entry<P> = unsafe extern "C" fn(*mut P) -> CuptiResult;

/// The three libraries the range profiler needs; libcupti loads the two others from its own
/// folder, so they are checked there before anything is called.
pub const LIBRARIES: [&str; 3] = ["libcupti", "libnvperf_host", "libnvperf_target"];

/// libcupti's entries the counter collection calls.
#[derive(Debug)]
pub struct Cupti {
    /// Where libcupti came from.
    pub path: PathBuf,
    pub get_result_string: unsafe extern "C" fn(CuptiResult, *mut *const c_char) -> CuptiResult,
    pub profiler_initialize: Entry<ProfilerInitialize>,
    pub device_get_chip_name: Entry<DeviceGetChipName>,
    pub host_initialize: Entry<HostInitialize>,
    pub host_deinitialize: Entry<HostDeinitialize>,
    pub host_get_metric_properties: Entry<HostGetMetricProperties>,
    pub host_evaluate: Entry<HostEvaluateToGpuValues>,
    pub host_add_metrics: Entry<HostConfigAddMetrics>,
    pub host_config_image_size: Entry<HostGetConfigImageSize>,
    pub host_config_image: Entry<HostGetConfigImage>,
    pub host_num_passes: Entry<HostGetNumOfPasses>,
    pub range_enable: Entry<RangeEnable>,
    pub range_disable: Entry<RangeObject>,
    pub range_set_config: Entry<RangeSetConfig>,
    pub range_start: Entry<RangeObject>,
    pub range_stop: Entry<RangeStop>,
    pub range_decode: Entry<RangeDecode>,
    pub range_counter_data_size: Entry<RangeCounterDataSize>,
    pub range_counter_data_init: Entry<RangeCounterDataInit>,
    pub range_counter_data_info: Entry<RangeCounterDataInfo>,
    /// The SASS Metrics API, or why this libcupti has none (the first entry missing).
    pub sass: Result<SassEntries, String>,
}

/// libcupti's SASS Metrics entries (`cupti_sass_metrics.h`, CUDA 12.5 and later).
#[derive(Debug, Clone, Copy)]
pub struct SassEntries {
    pub get_num_of_metrics: Entry<SassGetNumOfMetrics>,
    pub get_metrics: Entry<SassGetMetrics>,
    pub get_properties: Entry<SassGetProperties>,
    pub set_config: Entry<SassSetConfig>,
    pub unset_config: Entry<SassUnsetConfig>,
    pub enable: Entry<SassEnable>,
    pub disable: Entry<SassDisable>,
    pub get_data_properties: Entry<SassGetDataProperties>,
    pub flush_data: Entry<SassFlushData>,
}

extern "C" {
    /// The C library's `free`: CUPTI allocates the function names of SASS records with
    /// `malloc` and leaves them to the caller.
    pub fn free(p: *mut c_void);
}

/// Folders searched by absolute path: `KREPLAY_CUDA_LIB_DIR` (colon-separated), then each
/// CUDA installation's `lib64` and `extras/CUPTI/lib64`.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in crate::module::nvrtc_search_dirs() {
        out.push(d.join("../extras/CUPTI/lib64"));
        out.insert(out.len() - 1, d);
    }
    out
}

/// Every file in `dirs` whose name starts with `{library}.so`: folder by folder, in name
/// order within each.
pub fn files_in(dirs: &[PathBuf], library: &str) -> Vec<PathBuf> {
    let prefix = format!("{library}.so");
    let mut out = Vec::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .collect();
        names.sort();
        out.extend(names);
    }
    out
}

/// The first of [`files_in`].
pub fn find_in(dirs: &[PathBuf], library: &str) -> Option<PathBuf> {
    files_in(dirs, library).into_iter().next()
}

/// Finds the three libraries: libcupti in `dirs` (a copy the process already loaded wins),
/// the nvperf libraries in libcupti's folder or, failing that, in `dirs`. The error names the
/// first library missing.
pub fn locate(dirs: &[PathBuf]) -> Result<[PathBuf; 3], LibraryMissing> {
    let tried = |lib: &'static str, dirs: &[PathBuf]| LibraryMissing {
        library: lib,
        tried: dirs
            .iter()
            .map(|d| format!("{}/{lib}.so*", d.display()))
            .collect(),
    };
    let cupti = find_in(dirs, "libcupti").ok_or_else(|| tried("libcupti", dirs))?;
    let own = cupti
        .parent()
        .map(|p| vec![p.to_path_buf()])
        .unwrap_or_default();
    let mut found = vec![cupti];
    for lib in ["libnvperf_host", "libnvperf_target"] {
        let p = find_in(&own, lib)
            .or_else(|| find_in(dirs, lib))
            .ok_or_else(|| tried(lib, dirs))?;
        found.push(p);
    }
    Ok([found[0].clone(), found[1].clone(), found[2].clone()])
}

impl Cupti {
    /// Loads libcupti (after checking that the nvperf libraries are there too) and binds its
    /// entries. A libcupti the process already loaded is used as it is.
    pub fn load() -> Result<Self, CounterError> {
        use libloading::os::unix::{Library as Unix, RTLD_NOW};
        const RTLD_NOLOAD: c_int = 4;
        let mut lib = None;
        for name in ["libcupti.so.13", "libcupti.so.12", "libcupti.so"] {
            // SAFETY: RTLD_NOLOAD only finds a library already loaded; nothing is initialised.
            if let Ok(l) = unsafe { Unix::open(Some(name), RTLD_NOW | RTLD_NOLOAD) } {
                lib = Some((libloading::Library::from(l), PathBuf::from(name)));
                break;
            }
        }
        let (lib, path) = match lib {
            Some(l) => l,
            None => {
                let [cupti, host, target] = locate(&search_dirs())?;
                // libcupti opens the nvperf libraries by name from its own folder; loading
                // them first by path makes that open find these copies.
                for p in [&host, &target] {
                    // SAFETY: NVIDIA's profiler libraries; loading runs their initialisers.
                    match unsafe { libloading::Library::new(p) } {
                        Ok(l) => std::mem::forget(l),
                        Err(e) => return Err(CounterError::Load(format!("{}: {e}", p.display()))),
                    }
                }
                // SAFETY: as above.
                let l = unsafe { libloading::Library::new(&cupti) }
                    .map_err(|e| CounterError::Load(format!("{}: {e}", cupti.display())))?;
                (l, cupti)
            }
        };
        macro_rules! get {
            ($name:literal) => {{
                // SAFETY: the entry's documented signature (see the structs above).
                match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                    Ok(f) => *f,
                    Err(e) => {
                        return Err(CounterError::Load(format!(
                            "{} lacks {}: {e} (CUPTI 12.6 or later is needed)",
                            path.display(),
                            $name
                        )))
                    }
                }
            }};
        }
        let c = Cupti {
            get_result_string: get!("cuptiGetResultString"),
            profiler_initialize: get!("cuptiProfilerInitialize"),
            device_get_chip_name: get!("cuptiDeviceGetChipName"),
            host_initialize: get!("cuptiProfilerHostInitialize"),
            host_deinitialize: get!("cuptiProfilerHostDeinitialize"),
            host_get_metric_properties: get!("cuptiProfilerHostGetMetricProperties"),
            host_evaluate: get!("cuptiProfilerHostEvaluateToGpuValues"),
            host_add_metrics: get!("cuptiProfilerHostConfigAddMetrics"),
            host_config_image_size: get!("cuptiProfilerHostGetConfigImageSize"),
            host_config_image: get!("cuptiProfilerHostGetConfigImage"),
            host_num_passes: get!("cuptiProfilerHostGetNumOfPasses"),
            range_enable: get!("cuptiRangeProfilerEnable"),
            range_disable: get!("cuptiRangeProfilerDisable"),
            range_set_config: get!("cuptiRangeProfilerSetConfig"),
            range_start: get!("cuptiRangeProfilerStart"),
            range_stop: get!("cuptiRangeProfilerStop"),
            range_decode: get!("cuptiRangeProfilerDecodeData"),
            range_counter_data_size: get!("cuptiRangeProfilerGetCounterDataSize"),
            range_counter_data_init: get!("cuptiRangeProfilerCounterDataImageInitialize"),
            range_counter_data_info: get!("cuptiRangeProfilerGetCounterDataInfo"),
            sass: load_sass(&lib, &path),
            path,
        };
        // The entries stay valid for the life of the process.
        std::mem::forget(lib);
        Ok(c)
    }

    /// The SASS Metrics entries, or the error naming the one this libcupti lacks.
    pub fn sass(&self) -> Result<&SassEntries, CounterError> {
        self.sass
            .as_ref()
            .map_err(|why| CounterError::SassUnavailable(why.clone()))
    }

    /// CUPTI's text for `code`.
    pub fn describe(&self, code: CuptiResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: CUPTI writes a pointer to a static NUL-terminated string.
        let r = unsafe { (self.get_result_string)(code, &mut p) };
        if r == 0 && !p.is_null() {
            // SAFETY: as above.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("CUPTI error {code}")
        }
    }
}

/// Binds the SASS Metrics entries; the first one missing is the error.
fn load_sass(lib: &libloading::Library, path: &std::path::Path) -> Result<SassEntries, String> {
    macro_rules! get {
        ($name:literal) => {{
            // SAFETY: the entry's documented signature (see the structs above).
            match unsafe { lib.get(concat!($name, "\0").as_bytes()) } {
                Ok(f) => *f,
                Err(_) => {
                    return Err(format!(
                        "{} lacks {} (the SASS Metrics API needs CUPTI of CUDA 12.5 or later)",
                        path.display(),
                        $name
                    ))
                }
            }
        }};
    }
    Ok(SassEntries {
        get_num_of_metrics: get!("cuptiSassMetricsGetNumOfMetrics"),
        get_metrics: get!("cuptiSassMetricsGetMetrics"),
        get_properties: get!("cuptiSassMetricsGetProperties"),
        set_config: get!("cuptiSassMetricsSetConfig"),
        unset_config: get!("cuptiSassMetricsUnsetConfig"),
        enable: get!("cuptiSassMetricsEnable"),
        disable: get!("cuptiSassMetricsDisable"),
        get_data_properties: get!("cuptiSassMetricsGetDataProperties"),
        flush_data: get!("cuptiSassMetricsFlushData"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::cupti::sys as c;
    use std::mem::{align_of, size_of};

    macro_rules! same {
        ($ours:ty, $theirs:ty, $last:ident) => {
            assert_eq!(size_of::<$ours>(), size_of::<$theirs>(), stringify!($ours));
            assert_eq!(
                align_of::<$ours>(),
                align_of::<$theirs>(),
                stringify!($ours)
            );
            assert_eq!(
                struct_size!($ours, $last),
                struct_size!($theirs, $last),
                stringify!($ours)
            );
        };
    }

    #[test]
    fn the_parameter_structs_match_cudarcs_bindings_of_the_headers() {
        same!(
            ProfilerInitialize,
            c::CUpti_Profiler_Initialize_Params,
            pPriv
        );
        same!(
            DeviceGetChipName,
            c::CUpti_Device_GetChipName_Params,
            pChipName
        );
        same!(
            HostInitialize,
            c::CUpti_Profiler_Host_Initialize_Params,
            pHostObject
        );
        same!(
            HostDeinitialize,
            c::CUpti_Profiler_Host_Deinitialize_Params,
            pHostObject
        );
        same!(
            HostGetMetricProperties,
            c::CUpti_Profiler_Host_GetMetricProperties_Params,
            metricType
        );
        same!(
            HostEvaluateToGpuValues,
            c::CUpti_Profiler_Host_EvaluateToGpuValues_Params,
            pMetricValues
        );
        same!(
            HostConfigAddMetrics,
            c::CUpti_Profiler_Host_ConfigAddMetrics_Params,
            numMetrics
        );
        same!(
            HostGetConfigImageSize,
            c::CUpti_Profiler_Host_GetConfigImageSize_Params,
            configImageSize
        );
        same!(
            HostGetConfigImage,
            c::CUpti_Profiler_Host_GetConfigImage_Params,
            pConfigImage
        );
        same!(
            HostGetNumOfPasses,
            c::CUpti_Profiler_Host_GetNumOfPasses_Params,
            numOfPasses
        );
        same!(
            RangeSetConfig,
            c::CUpti_RangeProfiler_SetConfig_Params,
            targetNestingLevel
        );
        same!(
            RangeEnable,
            c::CUpti_RangeProfiler_Enable_Params,
            pRangeProfilerObject
        );
        same!(
            RangeObject,
            c::CUpti_RangeProfiler_Disable_Params,
            pRangeProfilerObject
        );
        same!(
            RangeObject,
            c::CUpti_RangeProfiler_Start_Params,
            pRangeProfilerObject
        );
        same!(
            RangeStop,
            c::CUpti_RangeProfiler_Stop_Params,
            isAllPassSubmitted
        );
        same!(
            RangeDecode,
            c::CUpti_RangeProfiler_DecodeData_Params,
            numOfRangeDropped
        );
        same!(
            RangeCounterDataSize,
            c::CUpti_RangeProfiler_GetCounterDataSize_Params,
            counterDataSize
        );
        same!(
            RangeCounterDataInit,
            c::CUpti_RangeProfiler_CounterDataImage_Initialize_Params,
            pCounterData
        );
        same!(
            RangeCounterDataInfo,
            c::CUpti_RangeProfiler_GetCounterDataInfo_Params,
            numTotalRanges
        );
        // Field order where it matters most: the set-up of the session.
        assert_eq!(
            std::mem::offset_of!(RangeSetConfig, passIndex),
            std::mem::offset_of!(c::CUpti_RangeProfiler_SetConfig_Params, passIndex)
        );
        assert_eq!(
            std::mem::offset_of!(RangeStop, isAllPassSubmitted),
            std::mem::offset_of!(c::CUpti_RangeProfiler_Stop_Params, isAllPassSubmitted)
        );
        // The header's sizes without tail padding: Stop ends in one byte.
        assert_eq!(RangeStop::default().structSize, 8 * 5 + 1);
        assert_eq!(RangeSetConfig::default().structSize, 8 * 11 + 2);
    }

    #[test]
    fn the_sass_metrics_structs_match_cudarcs_bindings_and_the_headers_sizes() {
        same!(
            SassGetNumOfMetrics,
            c::CUpti_SassMetrics_GetNumOfMetrics_Params,
            numOfMetrics
        );
        same!(
            SassGetMetrics,
            c::CUpti_SassMetrics_GetMetrics_Params,
            pMetricsList
        );
        same!(
            SassGetProperties,
            c::CUpti_SassMetrics_GetProperties_Params,
            metric
        );
        same!(
            SassSetConfig,
            c::CUpti_SassMetricsSetConfig_Params,
            deviceIndex
        );
        same!(
            SassUnsetConfig,
            c::CUpti_SassMetricsUnsetConfig_Params,
            deviceIndex
        );
        same!(
            SassEnable,
            c::CUpti_SassMetricsEnable_Params,
            enableLazyPatching
        );
        same!(
            SassDisable,
            c::CUpti_SassMetricsDisable_Params,
            numOfDroppedRecords
        );
        same!(
            SassGetDataProperties,
            c::CUpti_SassMetricsGetDataProperties_Params,
            numOfInstances
        );
        same!(
            SassFlushData,
            c::CUpti_SassMetricsFlushData_Params,
            numOfInstances
        );
        same!(
            SassMetricDetails,
            c::CUpti_SassMetrics_MetricDetails,
            pMetricDescription
        );
        same!(
            SassMetricConfig,
            c::CUpti_SassMetrics_Config,
            outputGranularity
        );
        same!(SassInstanceValue, c::CUpti_SassMetrics_InstanceValue, value);
        same!(SassData, c::CUpti_SassMetrics_Data, pInstanceValues);
        // Field order where CUPTI writes: a record's name and values, the flush's buffer.
        assert_eq!(
            std::mem::offset_of!(SassData, functionName),
            std::mem::offset_of!(c::CUpti_SassMetrics_Data, functionName)
        );
        assert_eq!(
            std::mem::offset_of!(SassData, pInstanceValues),
            std::mem::offset_of!(c::CUpti_SassMetrics_Data, pInstanceValues)
        );
        assert_eq!(
            std::mem::offset_of!(SassFlushData, pMetricsData),
            std::mem::offset_of!(c::CUpti_SassMetricsFlushData_Params, pMetricsData)
        );
        assert_eq!(
            std::mem::offset_of!(SassGetProperties, metric),
            std::mem::offset_of!(c::CUpti_SassMetrics_GetProperties_Params, metric)
        );
        // The headers' `*_STRUCT_SIZE` values (cudarc's generated constants).
        use c::CUpti_SassMetrics_STRUCT_SIZES as Sizes;
        let sizes: [(usize, Sizes); 10] = [
            (
                SassGetNumOfMetrics::default().structSize,
                c::SassMetrics_GetNumOfMetrics_Params_STRUCT_SIZE,
            ),
            (
                SassGetMetrics::default().structSize,
                c::SassMetrics_GetMetrics_Params_STRUCT_SIZE,
            ),
            (
                SassGetProperties::default().structSize,
                c::SassMetrics_GetProperties_Params_STRUCT_SIZE,
            ),
            (
                SassSetConfig::default().structSize,
                c::SassMetricsSetConfig_Params_STRUCT_SIZE,
            ),
            (
                SassUnsetConfig::default().structSize,
                c::SassMetricsUnsetConfig_Params_STRUCT_SIZE,
            ),
            (
                SassEnable::default().structSize,
                c::SassMetricsEnable_Params_STRUCT_SIZE,
            ),
            (
                SassDisable::default().structSize,
                c::SassMetricsDisable_Params_STRUCT_SIZE,
            ),
            (
                SassGetDataProperties::default().structSize,
                c::SassMetricsGetDataProperties_Params_STRUCT_SIZE,
            ),
            (
                SassFlushData::default().structSize,
                c::SassMetricsFlushData_Params_STRUCT_SIZE,
            ),
            (
                struct_size!(SassInstanceValue, value),
                c::SassMetrics_InstanceValue_STRUCT_SIZE,
            ),
        ];
        for (i, (ours, header)) in sizes.into_iter().enumerate() {
            assert_eq!(ours, header as usize, "struct {i}");
        }
        assert_eq!(SassEnable::default().structSize, 25);
        assert_eq!(SassFlushData::default().structSize, 40);
    }

    #[test]
    fn locating_names_the_first_missing_library_and_where_it_looked() {
        let root = std::env::temp_dir().join(format!("kreplay-cupti-{}", std::process::id()));
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let dirs = vec![a.clone(), b.clone()];
        let e = locate(&dirs).unwrap_err();
        assert_eq!(e.library, "libcupti");
        let msg = e.to_string();
        assert!(msg.contains("libcupti.so not found"), "{msg}");
        assert!(
            msg.contains(&format!("{}/libcupti.so*", a.display())),
            "{msg}"
        );
        assert!(msg.contains("KREPLAY_CUDA_LIB_DIR"), "{msg}");
        std::fs::write(b.join("libcupti.so.2025.3.1"), b"").unwrap();
        std::fs::write(b.join("libnvperf_host.so"), b"").unwrap();
        let e = locate(&dirs).unwrap_err();
        assert_eq!(e.library, "libnvperf_target");
        assert!(
            e.to_string().contains("libnvperf_target.so not found"),
            "{e}"
        );
        // The nvperf library beside libcupti is found; one in another folder too.
        std::fs::write(a.join("libnvperf_target.so"), b"").unwrap();
        let [c, h, t] = locate(&dirs).unwrap();
        assert_eq!(c, b.join("libcupti.so.2025.3.1"));
        assert_eq!(h, b.join("libnvperf_host.so"));
        assert_eq!(t, a.join("libnvperf_target.so"));
        let _ = std::fs::remove_dir_all(&root);
    }
}

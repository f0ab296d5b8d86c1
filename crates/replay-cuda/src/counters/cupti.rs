//! The checked layer: [`CuptiProfiler`], the [`Profiler`] over the real libcupti.
//!
//! Host objects: every compiled configuration keeps its own (`cuptiProfilerHostInitialize`
//! with the chip name, then `ConfigAddMetrics`), because evaluating values takes the host
//! object the image was made with; configurations the plan drops are deinitialised. Target:
//! one range-profiler object per context, one counter-data image per context, initialised
//! afresh for every session (one group of one dispatch). How long an object lives is
//! [`ObjectLife`] (`KREPLAY_CUDA_RANGE_OBJECT`). Measured on an H200: the first
//! `cuptiRangeProfilerStart` after a configuration is set costs about 170 ms on a new object
//! and about 40 ms on a kept one (later starts of a session a few ms), which made the new
//! object of every session 86–89% of the counters tool's time; but a kept object evaluates
//! only the configuration first set on it: another one set on it later (of any pass count)
//! ran its passes and evaluated to NaN, or was reported complete too early or too late. So
//! by default an object is kept while the same configuration is set on it again, and a
//! dispatch runs its groups in the order that starts with the one the last dispatch ended on
//! (`collect`); a plan of one configuration (`Packing::Single`) keeps one object throughout.
//!
//! SASS metrics: the configuration is set once per device (`cuptiSassMetricsSetConfig`; a
//! different one is set after `UnsetConfig`); each SASS pass enables lazy patching on the
//! context, and its end flushes the records and disables patching (which unpatches the
//! functions, so every dispatch's SASS pass patches its kernel again). Where CUPTI refuses
//! patching beside the context's range profiler object, that object is disabled and made
//! afresh by the next range group.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::plan::{
    Config, CounterError, Profiler, SassConfig, SassGranularity, SassMetricInfo, SassRecord,
    SassRecords,
};
use super::sys::{self, struct_size, Cupti};

/// Ranges a session's counter data holds: the dispatch's, the cache flush's, and room for a
/// kernel the backend might launch in between.
const MAX_RANGES: usize = 4;

struct Target {
    object: *mut c_void,
    counter_data: Vec<u8>,
    /// The configuration first set on `object` (its host object's handle; `None`: none was):
    /// the only one the object evaluates (above).
    born: Option<u64>,
}

/// `KREPLAY_CUDA_RANGE_OBJECT`: when a session gets a new range-profiler object.
pub const OBJECT_ENV: &str = "KREPLAY_CUDA_RANGE_OBJECT";

/// When a session runs on a new range-profiler object rather than the context's last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectLife {
    /// Every session on a new object (`session`).
    Session,
    /// One object per context for every session (`kept`; wrong for every configuration but
    /// the first, kept to measure that).
    Kept,
    /// Kept while the configuration set is the one first set on it (`auto`, the default).
    Auto,
}

impl ObjectLife {
    /// The value named in [`OBJECT_ENV`]; `Err` names what was expected.
    pub fn parse(v: &str) -> Result<Self, String> {
        match v.trim() {
            "" | "auto" => Ok(Self::Auto),
            "kept" => Ok(Self::Kept),
            "session" => Ok(Self::Session),
            other => Err(format!(
                "{OBJECT_ENV}={other:?}: expected auto, kept or session"
            )),
        }
    }

    /// As the environment sets it; a bad value is reported and keeps the default.
    pub fn from_env() -> Self {
        match std::env::var(OBJECT_ENV) {
            Err(_) => Self::Auto,
            Ok(v) => Self::parse(&v).unwrap_or_else(|e| {
                log::warn!("[kernel-replay] {e}; the default (auto) is used");
                Self::Auto
            }),
        }
    }

    /// Whether a configuration needs a new object where the context's object has had one
    /// set (`first`: it is the configuration first set on that object).
    pub fn renew(self, first: bool) -> bool {
        match self {
            Self::Session => true,
            Self::Kept => false,
            Self::Auto => !first,
        }
    }
}

/// The real CUPTI, loaded once per process.
pub struct CuptiProfiler {
    lib: Cupti,
    initialized: OnceLock<Result<(), CounterError>>,
    targets: Mutex<HashMap<u64, Target>>,
    /// A host object per chip for metric properties.
    describers: Mutex<HashMap<String, u64>>,
    /// The SASS configuration set on each device (by `CUdevice`).
    sass_configs: Mutex<HashMap<i32, SassConfig>>,
    life: ObjectLife,
}

// SAFETY: the raw pointers are CUPTI objects used only under `targets`' lock or, for host
// objects, by CUPTI calls that take them as plain handles.
unsafe impl Send for CuptiProfiler {}
// SAFETY: as above.
unsafe impl Sync for CuptiProfiler {}

impl std::fmt::Debug for CuptiProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuptiProfiler")
            .field("path", &self.lib.path)
            .finish_non_exhaustive()
    }
}

static GLOBAL: OnceLock<Result<CuptiProfiler, CounterError>> = OnceLock::new();

fn cstrings(v: &[String]) -> Result<Vec<CString>, CounterError> {
    v.iter()
        .map(|s| {
            CString::new(s.as_str())
                .map_err(|_| CounterError::Session(format!("metric name {s:?} holds a NUL byte")))
        })
        .collect()
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: CUPTI returns NUL-terminated strings it owns.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl CuptiProfiler {
    /// The process's CUPTI, loaded on first call; the error (a missing library, named) is the
    /// same on every call.
    pub fn global() -> Result<&'static Self, CounterError> {
        GLOBAL
            .get_or_init(|| {
                Cupti::load().map(|lib| Self {
                    lib,
                    initialized: OnceLock::new(),
                    targets: Mutex::new(HashMap::new()),
                    describers: Mutex::new(HashMap::new()),
                    sass_configs: Mutex::new(HashMap::new()),
                    life: ObjectLife::from_env(),
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Where libcupti came from.
    pub fn path(&self) -> &std::path::Path {
        &self.lib.path
    }

    fn check(&self, call: &'static str, r: sys::CuptiResult) -> Result<(), CounterError> {
        if r == 0 {
            Ok(())
        } else {
            Err(CounterError::Call {
                call,
                code: r,
                why: self.lib.describe(r),
            })
        }
    }

    fn init(&self) -> Result<(), CounterError> {
        self.initialized
            .get_or_init(|| {
                crate::is_available().map_err(|e| CounterError::Session(e.to_string()))?;
                let mut p = sys::ProfilerInitialize::default();
                // SAFETY: a valid, sized parameter struct.
                let r = unsafe { (self.lib.profiler_initialize)(&mut p) };
                self.check("cuptiProfilerInitialize", r)
            })
            .clone()
    }

    fn host_object(&self, chip: &str) -> Result<*mut c_void, CounterError> {
        self.init()?;
        let chip_c = CString::new(chip)
            .map_err(|_| CounterError::Session("chip name holds a NUL byte".into()))?;
        let mut p = sys::HostInitialize {
            profilerType: sys::PROFILER_TYPE_RANGE,
            pChipName: chip_c.as_ptr(),
            ..Default::default()
        };
        // SAFETY: a valid parameter struct whose chip name outlives the call.
        let r = unsafe { (self.lib.host_initialize)(&mut p) };
        self.check("cuptiProfilerHostInitialize", r)?;
        Ok(p.pHostObject)
    }

    fn host_release(&self, host: *mut c_void) {
        if host.is_null() {
            return;
        }
        let mut p = sys::HostDeinitialize {
            pHostObject: host,
            ..Default::default()
        };
        // SAFETY: a host object CUPTI created and nothing uses any more.
        let _ = unsafe { (self.lib.host_deinitialize)(&mut p) };
    }

    fn compile_on(
        &self,
        host: *mut c_void,
        chip: &str,
        metrics: &[String],
    ) -> Result<Config, CounterError> {
        let names = cstrings(metrics)?;
        let mut ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let mut add = sys::HostConfigAddMetrics {
            pHostObject: host,
            ppMetricNames: ptrs.as_mut_ptr(),
            numMetrics: ptrs.len(),
            ..Default::default()
        };
        // SAFETY: the names outlive the call; the host object is live.
        let r = unsafe { (self.lib.host_add_metrics)(&mut add) };
        if r == sys::CUPTI_ERROR_INVALID_METRIC_NAME {
            return Err(CounterError::Metrics {
                chip: chip.to_string(),
                bad: metrics
                    .iter()
                    .map(|m| (m.clone(), self.lib.describe(r)))
                    .collect(),
            });
        }
        self.check("cuptiProfilerHostConfigAddMetrics", r)?;
        let mut size = sys::HostGetConfigImageSize {
            pHostObject: host,
            ..Default::default()
        };
        // SAFETY: as above.
        let r = unsafe { (self.lib.host_config_image_size)(&mut size) };
        self.check("cuptiProfilerHostGetConfigImageSize", r)?;
        let mut image = vec![0u8; size.configImageSize];
        let mut get = sys::HostGetConfigImage {
            pHostObject: host,
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            ..Default::default()
        };
        // SAFETY: the buffer has the size CUPTI asked for.
        let r = unsafe { (self.lib.host_config_image)(&mut get) };
        self.check("cuptiProfilerHostGetConfigImage", r)?;
        let mut passes = sys::HostGetNumOfPasses {
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            ..Default::default()
        };
        // SAFETY: the image CUPTI just wrote.
        let r = unsafe { (self.lib.host_num_passes)(&mut passes) };
        self.check("cuptiProfilerHostGetNumOfPasses", r)?;
        Ok(Config {
            metrics: metrics.to_vec(),
            image,
            passes: passes.numOfPasses as u32,
            handle: host as u64,
        })
    }

    fn with_target<T>(
        &self,
        ctx: u64,
        f: impl FnOnce(&mut Target) -> Result<T, CounterError>,
    ) -> Result<T, CounterError> {
        let mut targets = self.targets.lock();
        let t = targets.get_mut(&ctx).ok_or_else(|| {
            CounterError::Session(format!("no range profiler on context {ctx:#x}"))
        })?;
        f(t)
    }

    fn enable(&self, ctx: u64) -> Result<*mut c_void, CounterError> {
        let mut p = sys::RangeEnable {
            ctx: ctx as *mut c_void,
            ..Default::default()
        };
        // SAFETY: a live context (the one current on the window's thread).
        let r = unsafe { (self.lib.range_enable)(&mut p) };
        self.check("cuptiRangeProfilerEnable", r)?;
        Ok(p.pRangeProfilerObject)
    }

    /// Disables `t`'s object and enables a new one on `ctx`.
    fn renew_object(&self, t: &mut Target, ctx: u64) -> Result<(), CounterError> {
        let mut p = sys::RangeObject {
            pRangeProfilerObject: t.object,
            ..Default::default()
        };
        // SAFETY: the object CUPTI created for this context; no session is running on it
        // (the collector begins a group only after the previous one ended).
        let _ = unsafe { (self.lib.range_disable)(&mut p) };
        t.born = None;
        t.object = self.enable(ctx)?;
        Ok(())
    }

    fn set_config(&self, t: &mut Target, config: &Config) -> Result<(), CounterError> {
        let names = cstrings(&config.metrics)?;
        let mut ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let mut size = sys::RangeCounterDataSize {
            pRangeProfilerObject: t.object,
            pMetricNames: ptrs.as_mut_ptr(),
            numMetrics: ptrs.len(),
            maxNumOfRanges: MAX_RANGES,
            maxNumRangeTreeNodes: MAX_RANGES as u32,
            ..Default::default()
        };
        // SAFETY: the names outlive the call; the object is live.
        let r = unsafe { (self.lib.range_counter_data_size)(&mut size) };
        self.check("cuptiRangeProfilerGetCounterDataSize", r)?;
        t.counter_data.clear();
        t.counter_data.resize(size.counterDataSize, 0);
        let mut init = sys::RangeCounterDataInit {
            pRangeProfilerObject: t.object,
            counterDataSize: t.counter_data.len(),
            pCounterData: t.counter_data.as_mut_ptr(),
            ..Default::default()
        };
        // SAFETY: the buffer has the size CUPTI asked for.
        let r = unsafe { (self.lib.range_counter_data_init)(&mut init) };
        self.check("cuptiRangeProfilerCounterDataImageInitialize", r)?;
        let mut set = sys::RangeSetConfig {
            pRangeProfilerObject: t.object,
            configSize: config.image.len(),
            pConfig: config.image.as_ptr(),
            counterDataImageSize: t.counter_data.len(),
            pCounterDataImage: t.counter_data.as_mut_ptr(),
            range: sys::AUTO_RANGE,
            replayMode: sys::USER_REPLAY,
            maxRangesPerPass: MAX_RANGES,
            numNestingLevels: 1,
            minNestingLevel: 1,
            passIndex: 0,
            targetNestingLevel: 1,
            ..Default::default()
        };
        // SAFETY: the image lives in the plan for the whole process and the counter data in
        // the target until the next session; the object is live.
        let r = unsafe { (self.lib.range_set_config)(&mut set) };
        self.check("cuptiRangeProfilerSetConfig", r)
    }
}

fn granularity(g: SassGranularity) -> u8 {
    match g {
        SassGranularity::Gpu => sys::SASS_GRANULARITY_GPU,
    }
}

impl CuptiProfiler {
    fn sass_enable(&self, ctx: u64) -> Result<(), CounterError> {
        let sass = self.lib.sass()?;
        let mut p = sys::SassEnable {
            ctx: ctx as *mut c_void,
            enableLazyPatching: 1,
            ..Default::default()
        };
        // SAFETY: a live context (the window's) and a valid parameter struct.
        let r = unsafe { (sass.enable)(&mut p) };
        self.check("cuptiSassMetricsEnable", r)
    }

    /// Sets `config` on `device` unless it is set already.
    fn sass_configure(&self, device: i32, config: &SassConfig) -> Result<(), CounterError> {
        let sass = self.lib.sass()?;
        let mut configs = self.sass_configs.lock();
        if configs.get(&device) == Some(config) {
            return Ok(());
        }
        if configs.remove(&device).is_some() {
            let mut u = sys::SassUnsetConfig {
                deviceIndex: device as u32,
                ..Default::default()
            };
            // SAFETY: a valid parameter struct for a device configured before.
            let r = unsafe { (sass.unset_config)(&mut u) };
            self.check("cuptiSassMetricsUnsetConfig", r)?;
        }
        let mut list: Vec<sys::SassMetricConfig> = config
            .metric_ids
            .iter()
            .map(|&id| sys::SassMetricConfig {
                metricId: id,
                outputGranularity: granularity(config.granularity),
            })
            .collect();
        let mut p = sys::SassSetConfig {
            numOfMetricConfig: list.len(),
            pConfigs: list.as_mut_ptr(),
            deviceIndex: device as u32,
            ..Default::default()
        };
        // SAFETY: `list` outlives the call and holds `numOfMetricConfig` entries.
        let r = unsafe { (sass.set_config)(&mut p) };
        self.check("cuptiSassMetricsSetConfig", r)?;
        configs.insert(device, config.clone());
        Ok(())
    }

    /// The records since patching was enabled on `ctx`.
    fn sass_flush(&self, ctx: u64) -> Result<SassRecords, CounterError> {
        let sass = self.lib.sass()?;
        let mut props = sys::SassGetDataProperties {
            ctx: ctx as *mut c_void,
            ..Default::default()
        };
        // SAFETY: a valid parameter struct; patching is enabled on the context.
        let r = unsafe { (sass.get_data_properties)(&mut props) };
        self.check("cuptiSassMetricsGetDataProperties", r)?;
        let (n, inst) = (props.numOfPatchedInstructionRecords, props.numOfInstances);
        let mut out = SassRecords {
            instances: inst,
            ..SassRecords::default()
        };
        if n == 0 || inst == 0 {
            return Ok(out);
        }
        let total = n
            .checked_mul(inst)
            .filter(|t| *t <= 1 << 28)
            .ok_or_else(|| {
                CounterError::Session(format!("{n} SASS records of {inst} instances: too many"))
            })?;
        let mut values = vec![sys::SassInstanceValue::default(); total];
        let mut records: Vec<sys::SassData> = (0..n).map(|_| sys::SassData::default()).collect();
        // One base pointer for every record's slice (in bounds: `i * inst + inst <= total`).
        let base = values.as_mut_ptr();
        for (i, r) in records.iter_mut().enumerate() {
            r.pInstanceValues = base.wrapping_add(i * inst);
        }
        let mut f = sys::SassFlushData {
            ctx: ctx as *mut c_void,
            numOfPatchedInstructionRecords: n,
            numOfInstances: inst,
            pMetricsData: records.as_mut_ptr(),
            ..Default::default()
        };
        // SAFETY: `records` holds `n` records, each pointing at `inst` values of `values`;
        // both outlive the call.
        let r = unsafe { (sass.flush_data)(&mut f) };
        let result = self.check("cuptiSassMetricsFlushData", r);
        // The names CUPTI allocated, each freed once (records of one function may share one).
        let mut names: Vec<*const c_char> = Vec::new();
        for (i, rec) in records.iter().enumerate() {
            if result.is_ok() {
                out.records.push(SassRecord {
                    function: text(rec.functionName),
                    pc_offset: rec.pcOffset,
                    values: values[i * inst..(i + 1) * inst]
                        .iter()
                        .map(|v| (v.metricId, v.value))
                        .collect(),
                });
            }
            if !rec.functionName.is_null() {
                names.push(rec.functionName);
            }
        }
        names.sort_unstable();
        names.dedup();
        for p in names {
            // SAFETY: a name CUPTI allocated with malloc for the caller, freed once, not used
            // after (copied above).
            unsafe { sys::free(p as *mut c_void) };
        }
        result.map(|()| out)
    }
}

impl Profiler for CuptiProfiler {
    fn chip(&self, ordinal: u32) -> Result<String, CounterError> {
        self.init()?;
        let mut p = sys::DeviceGetChipName {
            deviceIndex: ordinal as usize,
            ..Default::default()
        };
        // SAFETY: a valid parameter struct.
        let r = unsafe { (self.lib.device_get_chip_name)(&mut p) };
        self.check("cuptiDeviceGetChipName", r)?;
        Ok(text(p.pChipName))
    }

    fn compile(&self, chip: &str, metrics: &[String]) -> Result<Config, CounterError> {
        let host = self.host_object(chip)?;
        let r = self.compile_on(host, chip, metrics);
        if r.is_err() {
            self.host_release(host);
        }
        r
    }

    fn release(&self, config: Config) {
        self.host_release(config.handle as *mut c_void);
    }

    fn describe(&self, chip: &str, metric: &str) -> Result<(String, String), CounterError> {
        let host = {
            let mut d = self.describers.lock();
            match d.get(chip) {
                Some(h) => *h as *mut c_void,
                None => {
                    let h = self.host_object(chip)?;
                    d.insert(chip.to_string(), h as u64);
                    h
                }
            }
        };
        let name =
            CString::new(metric).map_err(|_| CounterError::Session("NUL in metric name".into()))?;
        let mut p = sys::HostGetMetricProperties {
            pHostObject: host,
            pMetricName: name.as_ptr(),
            ..Default::default()
        };
        // SAFETY: the name outlives the call; the host object lives for the process.
        let r = unsafe { (self.lib.host_get_metric_properties)(&mut p) };
        self.check("cuptiProfilerHostGetMetricProperties", r)?;
        Ok((text(p.pDimUnit), text(p.pDescription)))
    }

    fn current_context(&self) -> Result<u64, CounterError> {
        let mut c: crate::sys::CUcontext = std::ptr::null_mut();
        // SAFETY: out pointer to a live local.
        let r = unsafe { crate::sys::cuCtxGetCurrent(&mut c) };
        if r != crate::sys::CUresult::CUDA_SUCCESS || c.is_null() {
            return Err(CounterError::Session(format!(
                "no current context on the window's thread ({r:?})"
            )));
        }
        Ok(c as u64)
    }

    fn begin(&self, ctx: u64, config: &Config) -> Result<(), CounterError> {
        self.init()?;
        let mut targets = self.targets.lock();
        let t = match targets.entry(ctx) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(Target {
                object: self.enable(ctx)?,
                counter_data: Vec::new(),
                born: None,
            }),
        };
        // An object that refused a configuration still has it as its first, so the next
        // group starts on a new one where the life says so rather than retrying on it.
        let kept = t.born.is_some_and(|b| !self.life.renew(b == config.handle));
        let r = if t.born.is_some() && !kept {
            self.renew_object(t, ctx)
                .and_then(|()| self.set_config(t, config))
        } else {
            self.set_config(t, config).or_else(|e| {
                if !kept {
                    // A new object: a retry on another new one would repeat this same call.
                    return Err(e);
                }
                log::debug!("[kernel-replay] counters: {e} on a kept range profiler; on a new one");
                self.renew_object(t, ctx)
                    .and_then(|()| self.set_config(t, config))
            })
        };
        t.born.get_or_insert(config.handle);
        if let Err(CounterError::Call {
            call: "cuptiRangeProfilerEnable",
            ..
        }) = &r
        {
            // No object on this context any more: the next group enables one.
            targets.remove(&ctx);
        }
        r
    }

    fn start(&self, ctx: u64) -> Result<(), CounterError> {
        self.with_target(ctx, |t| {
            let mut p = sys::RangeObject {
                pRangeProfilerObject: t.object,
                ..Default::default()
            };
            // SAFETY: a live object with a configuration set.
            let r = unsafe { (self.lib.range_start)(&mut p) };
            self.check("cuptiRangeProfilerStart", r)
        })
    }

    fn stop(&self, ctx: u64) -> Result<bool, CounterError> {
        self.with_target(ctx, |t| {
            let mut p = sys::RangeStop {
                pRangeProfilerObject: t.object,
                ..Default::default()
            };
            // SAFETY: a live, started object.
            let r = unsafe { (self.lib.range_stop)(&mut p) };
            self.check("cuptiRangeProfilerStop", r)?;
            log::debug!(
                "[kernel-replay] counters: range profiler stopped: pass index {}, nesting level {}, all passes submitted {}",
                p.passIndex,
                p.targetNestingLevel,
                p.isAllPassSubmitted
            );
            Ok(p.isAllPassSubmitted != 0)
        })
    }

    fn decode(&self, ctx: u64, config: &Config) -> Result<Vec<f64>, CounterError> {
        self.with_target(ctx, |t| {
            let mut d = sys::RangeDecode {
                pRangeProfilerObject: t.object,
                ..Default::default()
            };
            // SAFETY: a live object whose session's passes were all submitted.
            let r = unsafe { (self.lib.range_decode)(&mut d) };
            self.check("cuptiRangeProfilerDecodeData", r)?;
            if d.numOfRangeDropped > 0 {
                log::warn!(
                    "[kernel-replay] counters: {} ranges dropped in a session",
                    d.numOfRangeDropped
                );
            }
            let mut info = sys::RangeCounterDataInfo {
                pCounterDataImage: t.counter_data.as_ptr(),
                counterDataImageSize: t.counter_data.len(),
                ..Default::default()
            };
            // SAFETY: the counter data the session wrote.
            let r = unsafe { (self.lib.range_counter_data_info)(&mut info) };
            self.check("cuptiRangeProfilerGetCounterDataInfo", r)?;
            if info.numTotalRanges == 0 {
                return Err(CounterError::Session(
                    "the session recorded no range (no kernel ran while the profiler was started)"
                        .into(),
                ));
            }
            let names = cstrings(&config.metrics)?;
            let mut ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
            let mut values = vec![0f64; ptrs.len()];
            let mut e = sys::HostEvaluateToGpuValues {
                pHostObject: config.handle as *mut c_void,
                pCounterDataImage: t.counter_data.as_ptr(),
                counterDataImageSize: t.counter_data.len(),
                rangeIndex: info.numTotalRanges - 1,
                ppMetricNames: ptrs.as_mut_ptr(),
                numMetrics: ptrs.len(),
                pMetricValues: values.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: names and values outlive the call and have `numMetrics` entries; the
            // host object is the one the image was compiled with.
            let r = unsafe { (self.lib.host_evaluate)(&mut e) };
            self.check("cuptiProfilerHostEvaluateToGpuValues", r)?;
            Ok(values)
        })
    }

    fn registers(&self, kernel_id: u64) -> Option<u32> {
        use crate::sys::{CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS as REGS, CUresult};
        let mut n: std::ffi::c_int = 0;
        // SAFETY: `kernel_id` is the launch's function handle (the backends' kernel ids);
        // out pointer to a live local.
        let r = unsafe { crate::sys::cuFuncGetAttribute(&mut n, REGS, kernel_id as _) };
        if r == CUresult::CUDA_SUCCESS {
            return Some(n.max(0) as u32);
        }
        // The runtime launches library kernels by their `CUkernel` handle (CUDA 12+), which
        // `cuFuncGetAttribute` does not take: ask for the current context's device.
        let mut dev: crate::sys::CUdevice = 0;
        // SAFETY: out pointer to a live local.
        if unsafe { crate::sys::cuCtxGetDevice(&mut dev) } != CUresult::CUDA_SUCCESS {
            return None;
        }
        // SAFETY: as above; a handle that is not a kernel is an error, not a fault.
        let r = unsafe { crate::sys::cuKernelGetAttribute(&mut n, REGS, kernel_id as _, dev) };
        (r == CUresult::CUDA_SUCCESS).then_some(n.max(0) as u32)
    }

    fn sass_metrics(&self, chip: &str) -> Result<Vec<SassMetricInfo>, CounterError> {
        let sass = self.lib.sass()?;
        self.init()?;
        let chip_c = CString::new(chip)
            .map_err(|_| CounterError::Session("chip name holds a NUL byte".into()))?;
        let mut n = sys::SassGetNumOfMetrics {
            pChipName: chip_c.as_ptr(),
            ..Default::default()
        };
        // SAFETY: the chip name outlives the call.
        let r = unsafe { (sass.get_num_of_metrics)(&mut n) };
        self.check("cuptiSassMetricsGetNumOfMetrics", r)?;
        let mut list = vec![
            sys::SassMetricDetails {
                metricId: 0,
                pMetricName: std::ptr::null(),
                pMetricDescription: std::ptr::null(),
            };
            n.numOfMetrics
        ];
        let mut g = sys::SassGetMetrics {
            pChipName: chip_c.as_ptr(),
            numOfMetrics: list.len(),
            pMetricsList: list.as_mut_ptr(),
            ..Default::default()
        };
        // SAFETY: `list` holds `numOfMetrics` entries; the chip name outlives the call.
        let r = unsafe { (sass.get_metrics)(&mut g) };
        self.check("cuptiSassMetricsGetMetrics", r)?;
        Ok(list
            .iter()
            .map(|m| SassMetricInfo {
                id: m.metricId,
                name: text(m.pMetricName),
                description: text(m.pMetricDescription),
            })
            .collect())
    }

    fn sass_begin(&self, ctx: u64, config: &SassConfig) -> Result<(), CounterError> {
        self.lib.sass()?;
        self.init()?;
        let mut dev: crate::sys::CUdevice = 0;
        // SAFETY: out pointer to a live local; the window's thread has `ctx` current.
        let r = unsafe { crate::sys::cuCtxGetDevice(&mut dev) };
        if r != crate::sys::CUresult::CUDA_SUCCESS {
            return Err(CounterError::Session(format!(
                "the SASS pass's context has no device ({r:?})"
            )));
        }
        self.sass_configure(dev, config)?;
        match self.sass_enable(ctx) {
            Ok(()) => Ok(()),
            Err(first) => {
                // Patching refused beside the context's range profiler object: disable that
                // object (the next range group makes a fresh one) and try once more.
                let Some(t) = self.targets.lock().remove(&ctx) else {
                    return Err(first);
                };
                log::debug!(
                    "[kernel-replay] counters: {first}; disabling the range profiler for the SASS pass"
                );
                let mut p = sys::RangeObject {
                    pRangeProfilerObject: t.object,
                    ..Default::default()
                };
                // SAFETY: the object CUPTI created for this context, used by nothing now.
                let _ = unsafe { (self.lib.range_disable)(&mut p) };
                self.sass_enable(ctx)
            }
        }
    }

    fn sass_end(&self, ctx: u64) -> Result<SassRecords, CounterError> {
        let sass = self.lib.sass()?;
        let flushed = self.sass_flush(ctx);
        let mut d = sys::SassDisable {
            ctx: ctx as *mut c_void,
            ..Default::default()
        };
        // SAFETY: a valid parameter struct; patching was enabled on the context.
        let r = unsafe { (sass.disable)(&mut d) };
        let disabled = self.check("cuptiSassMetricsDisable", r);
        let mut records = flushed?;
        disabled?;
        records.dropped = d.numOfDroppedRecords;
        if log::log_enabled!(log::Level::Debug) {
            // Per function: records, distinct instruction offsets, and each metric's total.
            type PerFunction = (
                usize,
                std::collections::BTreeSet<u32>,
                std::collections::BTreeMap<u64, u64>,
            );
            let mut by: std::collections::BTreeMap<&str, PerFunction> =
                std::collections::BTreeMap::new();
            for r in &records.records {
                let e = by.entry(r.function.as_str()).or_default();
                e.0 += 1;
                e.1.insert(r.pc_offset);
                for &(id, v) in &r.values {
                    *e.2.entry(id).or_default() += v;
                }
            }
            for (f, (n, pcs, totals)) in by {
                log::debug!(
                    "[kernel-replay] counters: SASS records of {f}: {n} records, {} offsets, {} instances each, totals by metric id {totals:?}",
                    pcs.len(),
                    records.instances
                );
            }
        }
        Ok(records)
    }

    fn prepare(&self, ctx: u64) -> Result<(), CounterError> {
        self.init()?;
        let mut targets = self.targets.lock();
        if let std::collections::hash_map::Entry::Vacant(v) = targets.entry(ctx) {
            v.insert(Target {
                object: self.enable(ctx)?,
                counter_data: Vec::new(),
                born: None,
            });
        }
        Ok(())
    }
}

const _: () = assert!(struct_size!(sys::RangeStop, isAllPassSubmitted) == 41);

#[cfg(test)]
mod tests {
    use super::ObjectLife;

    #[test]
    fn object_life_parses_its_three_values_and_names_a_bad_one() {
        assert_eq!(ObjectLife::parse(""), Ok(ObjectLife::Auto));
        assert_eq!(ObjectLife::parse(" auto "), Ok(ObjectLife::Auto));
        assert_eq!(ObjectLife::parse("kept"), Ok(ObjectLife::Kept));
        assert_eq!(ObjectLife::parse("session"), Ok(ObjectLife::Session));
        let e = ObjectLife::parse("fresh").unwrap_err();
        assert!(e.contains("KREPLAY_CUDA_RANGE_OBJECT=\"fresh\""), "{e}");
        assert!(e.contains("auto, kept or session"), "{e}");
    }

    #[test]
    fn auto_keeps_an_object_only_for_the_configuration_first_set_on_it() {
        for first in [false, true] {
            assert!(ObjectLife::Session.renew(first));
            assert!(!ObjectLife::Kept.renew(first));
            assert_eq!(ObjectLife::Auto.renew(first), !first);
        }
    }
}

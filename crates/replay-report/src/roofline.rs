//! The roofline of each dispatch (SPEC §12), from its raw metrics as Nsight Compute's
//! *GPU Speed Of Light Roofline Chart* section computes it: what the HTML report draws.
//!
//! Achieved work is counted per precision from the SASS thread-instruction counts
//! (`sm__sass_thread_inst_executed_op_{ffma,fadd,fmul}_pred_on.sum` for single precision, the
//! `d` opcodes for double, the `h` ones for half; an FMA is two operations), divided by `gpu__time_duration.sum`;
//! arithmetic intensity is that work over `dram__bytes.sum`. A precision whose three counts
//! are not all collected (finite), or whose work is 0, gives no point; a dispatch without a
//! point says why ([`Roofline::no_point`]).
//!
//! The ceilings come from the device's peak values, as ncu's section reads them:
//! memory `dram__bytes.sum.peak_sustained` (bytes per DRAM cycle) times the DRAM clock
//! (`dram__cycles_elapsed.avg.per_second`, else `dram__cycles_elapsed.avg` over the duration);
//! compute the FMA peak (`sm__sass_thread_inst_executed_op_{f,d,h}fma_pred_on.sum.peak_sustained`,
//! per SM cycle) times 2 times the SM clock (`sm__cycles_elapsed.avg.per_second`, else
//! `sm__cycles_elapsed.avg` over the duration). A ceiling whose inputs were not collected is
//! absent and named ([`Ceilings::missing`]), never guessed from a table of devices.
//!
//! Only values of one pass each are read ([`CounterReport::values`]: the pass that collected
//! the metric); nothing is summed across passes.

use std::collections::BTreeMap;

use replay_report_types::CounterReport;

/// GPU time of the dispatch (ns).
pub const DURATION: &str = "gpu__time_duration.sum";
/// Bytes moved to and from DRAM.
pub const DRAM_BYTES: &str = "dram__bytes.sum";
/// DRAM bytes per DRAM cycle at peak.
pub const DRAM_PEAK: &str = "dram__bytes.sum.peak_sustained";
/// DRAM cycles elapsed (per unit).
pub const DRAM_CYCLES: &str = "dram__cycles_elapsed.avg";
/// The DRAM clock (Hz), where collected as such.
pub const DRAM_CLOCK: &str = "dram__cycles_elapsed.avg.per_second";
/// SM cycles elapsed (per SM).
pub const SM_CYCLES: &str = "sm__cycles_elapsed.avg";
/// The SM clock (Hz), where collected as such.
pub const SM_CLOCK: &str = "sm__cycles_elapsed.avg.per_second";

/// A floating-point precision of the chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precision {
    /// FP32.
    Single,
    /// FP64.
    Double,
    /// FP16 (the `h` opcodes).
    Half,
}

impl Precision {
    /// Both, in the order they are drawn.
    pub const ALL: [Precision; 3] = [Precision::Single, Precision::Double, Precision::Half];

    /// The operation counts and the operations each instruction does.
    pub fn ops(self) -> [(&'static str, f64); 3] {
        match self {
            Precision::Single => [
                ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", 2.0),
                ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", 1.0),
                ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", 1.0),
            ],
            Precision::Double => [
                ("sm__sass_thread_inst_executed_op_dfma_pred_on.sum", 2.0),
                ("sm__sass_thread_inst_executed_op_dadd_pred_on.sum", 1.0),
                ("sm__sass_thread_inst_executed_op_dmul_pred_on.sum", 1.0),
            ],
            Precision::Half => [
                ("sm__sass_thread_inst_executed_op_hfma_pred_on.sum", 2.0),
                ("sm__sass_thread_inst_executed_op_hadd_pred_on.sum", 1.0),
                ("sm__sass_thread_inst_executed_op_hmul_pred_on.sum", 1.0),
            ],
        }
    }

    /// The FMA peak per SM cycle (whole GPU) the compute ceiling is made of.
    pub fn peak(self) -> &'static str {
        match self {
            Precision::Single => "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
            Precision::Double => "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained",
            Precision::Half => "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",
        }
    }

    /// `fp32` / `fp64`: the HTML report's class and data attribute.
    pub fn tag(self) -> &'static str {
        match self {
            Precision::Single => "fp32",
            Precision::Double => "fp64",
            Precision::Half => "fp16",
        }
    }

    /// `FP32` / `FP64`.
    pub fn label(self) -> &'static str {
        match self {
            Precision::Single => "FP32",
            Precision::Double => "FP64",
            Precision::Half => "FP16",
        }
    }
}

/// One point of the chart: one precision of one dispatch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Its precision.
    pub precision: Precision,
    /// Floating-point operations.
    pub flops: f64,
    /// DRAM bytes.
    pub bytes: f64,
    /// GPU time (s).
    pub seconds: f64,
}

impl Point {
    /// Arithmetic intensity, FLOP per DRAM byte.
    pub fn intensity(&self) -> f64 {
        self.flops / self.bytes
    }

    /// Achieved FLOP/s.
    pub fn achieved(&self) -> f64 {
        self.flops / self.seconds
    }
}

/// The roofs of one dispatch (or of the whole chart: [`Ceilings::max`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ceilings {
    /// Peak DRAM bandwidth, byte/s.
    pub memory: Option<f64>,
    /// Peak FP32 FLOP/s.
    pub single: Option<f64>,
    /// Peak FP64 FLOP/s.
    pub double: Option<f64>,
    /// Peak FP16 FLOP/s.
    pub half: Option<f64>,
    /// The metrics an absent ceiling needs that were not collected, in the order above.
    pub missing: Vec<&'static str>,
}

impl Ceilings {
    /// The compute ceiling of a precision.
    pub fn compute(&self, p: Precision) -> Option<f64> {
        match p {
            Precision::Single => self.single,
            Precision::Double => self.double,
            Precision::Half => self.half,
        }
    }

    /// The highest of each ceiling over several dispatches (clocks differ between them; the
    /// roof of a chart of all is the highest any reached); `missing` is kept only where no
    /// dispatch has the ceiling.
    pub fn max<'a>(all: impl IntoIterator<Item = &'a Ceilings>) -> Ceilings {
        let hi = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        let mut out = Ceilings::default();
        let mut missing: Vec<&'static str> = Vec::new();
        let mut any = false;
        for c in all {
            any = true;
            out.memory = hi(out.memory, c.memory);
            out.single = hi(out.single, c.single);
            out.double = hi(out.double, c.double);
            out.half = hi(out.half, c.half);
            for m in &c.missing {
                if !missing.contains(m) {
                    missing.push(m);
                }
            }
        }
        if any {
            let need = ceiling_inputs();
            out.missing = missing
                .into_iter()
                .filter(|m| {
                    need.iter()
                        .any(|(which, list)| list.contains(m) && out.get(*which).is_none())
                })
                .collect();
        }
        out
    }

    fn get(&self, which: usize) -> Option<f64> {
        [self.memory, self.single, self.double, self.half][which]
    }
}

/// The inputs of each ceiling (0 memory, 1 FP32, 2 FP64, 3 FP16), for [`Ceilings::max`].
fn ceiling_inputs() -> [(usize, Vec<&'static str>); 4] {
    [
        (0, vec![DRAM_PEAK, DRAM_CYCLES, DRAM_CLOCK, DURATION]),
        (
            1,
            vec![Precision::Single.peak(), SM_CYCLES, SM_CLOCK, DURATION],
        ),
        (
            2,
            vec![Precision::Double.peak(), SM_CYCLES, SM_CLOCK, DURATION],
        ),
        (
            3,
            vec![Precision::Half.peak(), SM_CYCLES, SM_CLOCK, DURATION],
        ),
    ]
}

/// One dispatch's roofline.
#[derive(Debug, Clone, PartialEq)]
pub struct Roofline {
    /// The dispatch.
    pub dispatch_id: u64,
    /// Its points, FP32, FP64 then FP16; empty when [`Self::no_point`] says why.
    pub points: Vec<Point>,
    /// Why it has no point (`None` when it has one).
    pub no_point: Option<String>,
    /// Its ceilings.
    pub ceilings: Ceilings,
}

impl Roofline {
    /// Total FLOP/s over its points (every precision together), if it has any.
    pub fn achieved(&self) -> Option<f64> {
        let p = self.points.first()?;
        Some(self.points.iter().map(|p| p.flops).sum::<f64>() / p.seconds)
    }

    /// Total FLOP per DRAM byte over its points, if it has any.
    pub fn intensity(&self) -> Option<f64> {
        let p = self.points.first()?;
        Some(self.points.iter().map(|p| p.flops).sum::<f64>() / p.bytes)
    }
}

/// The roofline of one dispatch from its raw `values` (metric name to value).
pub fn roofline(dispatch_id: u64, values: &BTreeMap<String, f64>) -> Roofline {
    let get = |m: &str| values.get(m).copied().filter(|v| v.is_finite());
    let seconds = get(DURATION).map(|ns| ns * 1e-9);
    let per_second = |clock: &str, cycles: &str| {
        get(clock).or_else(|| Some(get(cycles)? / seconds.filter(|s| *s > 0.0)?))
    };
    let sm_clock = per_second(SM_CLOCK, SM_CYCLES);
    let mut missing: Vec<&'static str> = Vec::new();
    let mut ceiling = |need: [&'static str; 3], v: Option<f64>| {
        let v = v.filter(|v| v.is_finite() && *v > 0.0);
        if v.is_none() {
            for m in need {
                if get(m).is_none() && !missing.contains(&m) {
                    missing.push(m);
                }
            }
        }
        v
    };
    let memory = ceiling(
        [DRAM_PEAK, DRAM_CYCLES, DURATION],
        get(DRAM_PEAK)
            .zip(per_second(DRAM_CLOCK, DRAM_CYCLES))
            .map(|(a, b)| a * b),
    );
    let [single, double, half] = Precision::ALL.map(|p| {
        ceiling(
            [p.peak(), SM_CYCLES, DURATION],
            get(p.peak()).zip(sm_clock).map(|(a, b)| 2.0 * a * b),
        )
    });
    let ceilings = Ceilings {
        memory,
        single,
        double,
        half,
        missing,
    };

    let mut points = Vec::new();
    let mut not_collected: Vec<&str> = Vec::new();
    let mut zero = 0;
    let mut incomplete = 0;
    let bytes = get(DRAM_BYTES);
    for p in Precision::ALL {
        let counts: Vec<Option<f64>> = p.ops().iter().map(|(m, _)| get(m)).collect();
        if counts.iter().any(Option::is_none) {
            for ((m, _), c) in p.ops().iter().zip(&counts) {
                if c.is_none() {
                    not_collected.push(m);
                }
            }
            incomplete += 1;
            continue;
        }
        let flops: f64 = p
            .ops()
            .iter()
            .zip(&counts)
            .map(|((_, per), c)| per * c.unwrap_or(0.0))
            .sum();
        if flops <= 0.0 {
            zero += 1;
            continue;
        }
        if let (Some(bytes), Some(seconds)) = (bytes, seconds) {
            if bytes > 0.0 && seconds > 0.0 {
                points.push(Point {
                    precision: p,
                    flops,
                    bytes,
                    seconds,
                });
            }
        }
    }
    let no_point = if !points.is_empty() {
        None
    } else {
        let mut base: Vec<&str> = Vec::new();
        for m in [DURATION, DRAM_BYTES] {
            if get(m).is_none() {
                base.push(m);
            }
        }
        Some(if !base.is_empty() || incomplete == Precision::ALL.len() {
            base.extend(not_collected.iter().copied());
            format!("not collected: {}", base.join(", "))
        } else if zero + incomplete == Precision::ALL.len() {
            "no floating-point operation counted (its FADD, FMUL and FMA counts are 0)".into()
        } else if bytes == Some(0.0) {
            "no DRAM traffic counted (dram__bytes.sum is 0): the arithmetic intensity is unbounded"
                .into()
        } else {
            "its duration (gpu__time_duration.sum) is 0".into()
        })
    };
    Roofline {
        dispatch_id,
        points,
        no_point,
        ceilings,
    }
}

/// Every dispatch's roofline, in the report's dispatch order.
pub fn rooflines(report: &CounterReport) -> Vec<Roofline> {
    let values = report.values();
    let empty = BTreeMap::new();
    report
        .dispatches
        .iter()
        .map(|d| {
            let plain: BTreeMap<String, f64> = values
                .get(&d.dispatch_id)
                .unwrap_or(&empty)
                .iter()
                .map(|(k, (v, _))| (k.clone(), *v))
                .collect();
            roofline(d.dispatch_id, &plain)
        })
        .collect()
}

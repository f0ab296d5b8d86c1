//! The counters tool's planning, done before any program starts: the metric list compiled
//! for the first device's chip (passes, sets' metrics the chip lacks left out), and
//! `--list-sass`'s listing of the chip's SASS metrics.

use super::args::{RunArgs, USAGE};

/// `--list-sass`: the first device's chip, its SASS metrics on stdout, and the plan of the
/// list if one is given; the exit status.
pub(super) fn list_sass(a: &RunArgs) -> u8 {
    use replay_cuda::counters::{plan_for_device, sass_metrics_for_device, CounterError};
    let (chip, list) = match sass_metrics_for_device(0) {
        Ok(l) => l,
        Err(e) => {
            crate::say(format_args!("kreplay run: --list-sass: {e}"));
            return 1;
        }
    };
    let mut text = format!(
        "{chip}: {} SASS metrics
",
        list.len()
    );
    for m in &list {
        text.push_str(&format!(
            "{}	{}	{}
",
            m.name, m.id, m.description
        ));
    }
    if !crate::print_out(text.trim_end()) {
        return 1;
    }
    let names = a.metric_list();
    if names.is_empty() {
        return 0;
    }
    match plan_for_device(0, &names) {
        Ok(plan) => {
            let j = serde_json::to_string_pretty(&plan.summary()).unwrap_or_default();
            if crate::print_out(&j) {
                0
            } else {
                1
            }
        }
        Err(e @ (CounterError::Metrics { .. } | CounterError::Empty)) => {
            crate::say(format_args!("kreplay run: {e}"));
            2
        }
        Err(e) => {
            crate::say(format_args!("kreplay run: --list-sass: {e}"));
            1
        }
    }
}

/// The plan's passes, one line each: the range groups, then the SASS pass.
pub(super) fn plan_lines(plan: &replay_cuda::counters::MetricPlan) -> Vec<String> {
    let mut lines: Vec<String> = plan
        .groups
        .iter()
        .map(|g| {
            format!(
                "pass {}{}: {}",
                g.first_pass,
                if g.config.passes > 1 {
                    format!("-{}", g.first_pass + g.config.passes - 1)
                } else {
                    String::new()
                },
                g.config.metrics.join(",")
            )
        })
        .collect();
    if let Some(s) = &plan.sass {
        let m: Vec<String> = s
            .metrics
            .iter()
            .map(|m| format!("{} (SASS {})", m.name, m.api_name))
            .collect();
        lines.push(format!("pass {}: {}", s.first_pass, m.join(",")));
    }
    lines
}

/// Compiles the counters tool's list before the program starts: the passes to ask for, or
/// the exit status (2: a metric cannot be collected; 1: no CUPTI or no driver).
/// A set is a convenience over what chips offer: the metrics of `--set` that the chip cannot
/// collect (`bad`) are left out, one line naming them, as long as every one of them came
/// from the set (a metric asked for by name is an error) and some metric remains. `None`:
/// nothing to leave out that way.
pub(super) fn without_unavailable_set_metrics(
    a: &RunArgs,
    names: &[String],
    chip: &str,
    bad: &[(String, String)],
) -> Option<Vec<String>> {
    let set = a
        .set
        .as_deref()
        .or(a.sections.first().map(String::as_str))?;
    if bad.is_empty() || bad.iter().any(|(m, _)| a.metrics.contains(m)) {
        return None;
    }
    let rest: Vec<String> = names
        .iter()
        .filter(|n| !bad.iter().any(|(m, _)| m == *n))
        .cloned()
        .collect();
    if rest.is_empty() {
        return None;
    }
    crate::say(format_args!(
        "kreplay run: --set {set}: left out, not collectable on {chip}: {}",
        bad.iter()
            .map(|(m, why)| format!("{m} ({why})"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    Some(rest)
}

/// Compiles the counters' list for device 0 before the program starts: the passes to ask for
/// and the list to collect (a set's metrics the chip lacks left out), or the exit status.
pub(super) fn plan_counters(a: &RunArgs) -> Result<(u64, Vec<String>), u8> {
    use replay_cuda::counters::{plan_for_device, CounterError};
    let mut names = a.metric_list();
    if let Some(line) = a.resolved_sections().not_collectable_line() {
        crate::say(format_args!("kreplay run: counters: {line}"));
    }
    let mut planned = plan_for_device(0, &names);
    if let Err(CounterError::Metrics { chip, bad }) = &planned {
        if let Some(rest) = without_unavailable_set_metrics(a, &names, chip, bad) {
            names = rest;
            planned = plan_for_device(0, &names);
        }
    }
    match planned {
        Ok(plan) => {
            let groups = plan_lines(&plan);
            crate::say(format_args!(
                "kreplay run: counters: {} metrics on {} in {} passes (the host API's single configuration: {}); {}",
                names.len(),
                plan.chip,
                plan.passes,
                plan.single_config_passes,
                groups.join("; ")
            ));
            let given = if a.passes_given { a.passes } else { 1 };
            Ok((given.max(u64::from(plan.passes)), names))
        }
        Err(e @ (CounterError::Metrics { .. } | CounterError::Empty)) => {
            crate::say(format_args!("kreplay run: {e}\n{USAGE}"));
            Err(2)
        }
        Err(e) => {
            crate::say(format_args!(
                "kreplay run: counters cannot be collected here: {e}; the program was not started"
            ));
            Err(1)
        }
    }
}

//! Kernel names as Nsight Compute writes them (SPEC §12), so our outputs join with ncu's:
//! [`ncu_demangled`] turns the GNU demangler's spelling into ncu's (`(anonymous namespace)`
//! is `<unnamed>`, `{lambda(int)#1}` is `[lambda(int) (instance 1)]`, `{unnamed type#1}` is
//! `[unnamed type (instance 1)]`), and [`short_names`] gives the table's short function name
//! (no return type, no arguments, no templates), made longer only where two different
//! kernels would otherwise read the same.

use std::collections::BTreeMap;

/// `name` (a GNU demangler's output) in Nsight Compute's spelling.
pub fn ncu_demangled(name: &str) -> String {
    let s = name.replace("(anonymous namespace)", "<unnamed>");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        match braced(tail) {
            Some((text, used)) => {
                out.push_str(&text);
                rest = &tail[used..];
            }
            None => {
                out.push('{');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `{lambda(ARGS)#N}` or `{unnamed type#N}` at the start of `s`: ncu's text and the bytes
/// used.
fn braced(s: &str) -> Option<(String, usize)> {
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut end = None;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let end = end?;
    let inner = &s[1..end];
    let hash = inner.rfind('#')?;
    let (what, n) = (&inner[..hash], &inner[hash + 1..]);
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !(what.starts_with("lambda(") || what == "unnamed type") {
        return None;
    }
    // Nested lambdas inside the arguments are converted too.
    Some((format!("[{} (instance {n})]", ncu_demangled(what)), end + 1))
}

/// The index of the `(` opening the argument list that ends `s`, if `s` ends with one.
fn args_start(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.last() != Some(&b')') {
        return None;
    }
    let mut depth = 0i32;
    for i in (0..b.len()).rev() {
        match b[i] {
            b')' | b'>' | b'}' | b']' => depth += 1,
            b'(' | b'<' | b'{' | b'[' => {
                depth -= 1;
                if depth == 0 {
                    return (b[i] == b'(').then_some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The qualified name: without the argument list and the return type.
fn qualified(full: &str) -> &str {
    let s = full.trim();
    let s = match args_start(s) {
        Some(i) if i > 0 => &s[..i],
        _ => s,
    };
    // The return type ends at the last space outside brackets.
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut cut = 0;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' | b'<' | b'{' | b'[' => depth += 1,
            b')' | b'>' | b'}' | b']' => depth -= 1,
            b' ' if depth == 0 => cut = i + 1,
            _ => {}
        }
    }
    &s[cut..]
}

/// `q` with every top-level template argument list written `<...>`.
fn templates_abbreviated(q: &str) -> String {
    let mut out = String::with_capacity(q.len());
    let mut depth = 0i32;
    for c in q.chars() {
        match c {
            '<' => {
                if depth == 0 {
                    out.push_str("<...>");
                }
                depth += 1;
            }
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The function's own name: the last component of `q`, without its template arguments.
fn base(q: &str) -> String {
    let b = q.as_bytes();
    let mut depth = 0i32;
    let mut start = 0;
    let mut end = b.len();
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' | b'<' | b'{' | b'[' => {
                if c == b'<' && depth == 0 && end == b.len() {
                    end = i;
                }
                depth += 1;
            }
            b')' | b'>' | b'}' | b']' => depth -= 1,
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => {
                start = i + 2;
                end = b.len();
            }
            _ => {}
        }
    }
    if start >= end {
        return q.to_string();
    }
    q[start..end].to_string()
}

/// The name at detail `level`: 0 the function's name, 1 qualified with templates
/// abbreviated, 2 qualified with templates, 3 the whole name; in ncu's spelling.
fn at_level(full: &str, level: u8) -> String {
    let q = qualified(full);
    let s = match level {
        0 => base(q),
        1 => templates_abbreviated(q),
        2 => q.to_string(),
        _ => full.to_string(),
    };
    ncu_demangled(&s)
}

/// The short name of each of `names` (demangled, GNU spelling): the function's name, longer
/// only where two different names would read the same (qualified with templates abbreviated,
/// then with templates, then whole). Two different names never get the same short name.
pub fn short_names<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, String> {
    let all: Vec<&str> = {
        let mut v: Vec<&str> = names.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let mut out = BTreeMap::new();
    let mut pending: Vec<&str> = all;
    for level in 0..=3u8 {
        let mut by_text: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for n in &pending {
            by_text.entry(at_level(n, level)).or_default().push(n);
        }
        pending = Vec::new();
        for (text, group) in by_text {
            if group.len() == 1 || level == 3 {
                for n in group {
                    out.insert(n.to_string(), text.clone());
                }
            } else {
                pending.extend(group);
            }
        }
    }
    // A short name that equals another's longer one (rare): the whole names.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for v in out.values() {
        *seen.entry(v.clone()).or_default() += 1;
    }
    for (full, short) in out.iter_mut() {
        if seen[short.as_str()] > 1 {
            *short = ncu_demangled(full);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: &str = "cub::CUB_300102_SM_750_800_860_890_900_1000";

    fn cub(kernel: &str, t: &str) -> String {
        format!(
            "void {NS}::{kernel}<{NS}::DeviceReducePolicy<{t}, unsigned int, cuda::std::__4::plus<{t}>>::Policy1000, {t}*, {t}*, unsigned int, cuda::std::__4::plus<{t}>, {t}, cuda::std::__4::identity>({t}*, {t}*, unsigned int, cuda::std::__4::plus<{t}>, {t}, cuda::std::__4::identity)"
        )
    }

    #[test]
    fn cub_kernels_get_their_function_names_and_no_two_read_the_same() {
        let names = [
            cub("DeviceReduceKernel", "float"),
            cub("DeviceReduceSingleTileKernel", "float"),
            cub("DeviceReduceKernel", "double"),
            cub("DeviceScanInitKernel", "float"),
            "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)".to_string(),
            "kr_tiny".to_string(),
            "kr_rmw(unsigned long*, unsigned long, unsigned long)".to_string(),
        ];
        let s = short_names(names.iter().map(String::as_str));
        assert_eq!(s[&names[1]], "DeviceReduceSingleTileKernel");
        assert_eq!(s[&names[3]], "DeviceScanInitKernel");
        assert_eq!(s[&names[4]], "Kernel2");
        assert_eq!(s[&names[5]], "kr_tiny");
        assert_eq!(s[&names[6]], "kr_rmw");
        // Two instantiations of one template: their template arguments tell them apart.
        assert!(s[&names[0]].contains("DeviceReduceKernel<") && s[&names[0]].contains("float"));
        assert!(s[&names[2]].contains("double"), "{}", s[&names[2]]);
        assert!(
            !s[&names[0]].contains("(float*"),
            "no arguments: {}",
            s[&names[0]]
        );
        let mut texts: Vec<&String> = s.values().collect();
        texts.sort();
        texts.dedup();
        assert_eq!(texts.len(), names.len(), "{s:?}");
    }

    #[test]
    fn names_in_different_namespaces_are_qualified_with_templates_abbreviated() {
        let a = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)";
        let b = "void other::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)";
        let s = short_names([a, b]);
        assert_eq!(s[a], "at::native::reduce_kernel<...>");
        assert_eq!(s[b], "other::reduce_kernel<...>");
    }

    #[test]
    fn pytorch_lambdas_and_anonymous_namespaces_are_spelled_as_ncu_spells_them() {
        let gnu = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>>(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)";
        let ncu = ncu_demangled(gnu);
        assert!(
            !ncu.contains("(anonymous namespace)") && !ncu.contains("{lambda"),
            "{ncu}"
        );
        assert!(
            ncu.contains("at::native::<unnamed>::launch_clamp_scalar("),
            "{ncu}"
        );
        assert!(
            ncu.contains("::[lambda() (instance 1)]::operator()() const::[lambda() (instance 7)]::operator()() const::[lambda(float) (instance 1)], std::array<char*, 2ul>>"),
            "{ncu}"
        );
        assert_eq!(short_names([gnu])[gnu], "vectorized_elementwise_kernel");
        assert_eq!(
            ncu_demangled("void (anonymous namespace)::k({unnamed type#2})"),
            "void <unnamed>::k([unnamed type (instance 2)])"
        );
        // A brace that is no lambda stays.
        assert_eq!(ncu_demangled("f({x})"), "f({x})");
        // A kernel in an anonymous namespace: its function name.
        assert_eq!(
            short_names(["void (anonymous namespace)::softmax_warp_forward<float>(float*)"])
                .into_values()
                .collect::<Vec<_>>(),
            vec!["softmax_warp_forward".to_string()]
        );
    }
}

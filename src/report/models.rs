//! The human-readable `edgebench models` listing.

use crate::models::spec::{NetSummary, StageInfo};
use std::fmt::Write;

fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn stage_lines(out: &mut String, stages: &[StageInfo], indent: &str) {
    for s in stages {
        let [c, h, w] = s.output;
        let _ = writeln!(
            out,
            "{indent}{:<24} {:<36} {:>4}x{:<3}x{:<3} {:>12} params {:>14} MACs",
            s.name,
            s.kind,
            c,
            h,
            w,
            group(s.params),
            group(s.macs)
        );
    }
}

pub fn models_text(nets: &[NetSummary]) -> String {
    let mut out = String::new();
    for n in nets {
        let [c, h, w] = n.input;
        let _ = writeln!(out, "{} — {}", n.name, n.description);
        let _ = writeln!(out, "  input {c}x{h}x{w}");
        let _ = writeln!(
            out,
            "  parameters {} ({} without auxiliary heads)",
            group(n.params),
            group(n.params_without_aux)
        );
        let _ = writeln!(
            out,
            "  forward multiply-adds per image {:.3} G ({:.3} G without auxiliary heads)",
            n.forward_macs as f64 / 1e9,
            n.forward_macs_without_aux as f64 / 1e9
        );
        stage_lines(&mut out, &n.stages, "  ");
        for aux in &n.aux_heads {
            let _ = writeln!(
                out,
                "  auxiliary head {} after {} (loss weight {}):",
                aux.name, aux.after, aux.loss_weight
            );
            stage_lines(&mut out, &aux.stages, "    ");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_thousands() {
        assert_eq!(super::group(60_965_224), "60,965,224");
        assert_eq!(super::group(999), "999");
        assert_eq!(super::group(1000), "1,000");
    }
}

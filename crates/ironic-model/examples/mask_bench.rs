//! How long secret masking takes per byte on texts built to be hard to mask
//! (`ironic_model::secrets::hostile_texts`), at 64 KiB and 1 MiB: equal figures at both
//! sizes mean linear time. `cargo run --release -p ironic-model --example mask_bench`.

use std::time::Instant;

use ironic_model::secrets::{hostile_texts, mask_text};

fn main() {
    println!("{:<26} {:>10} {:>10}", "shape", "64 KiB", "1 MiB");
    let small = hostile_texts(64 << 10);
    let large = hostile_texts(1 << 20);
    for ((shape, s), (_, l)) in small.iter().zip(&large) {
        println!(
            "{shape:<26} {:>7.2} ns {:>7.2} ns",
            ns_per_byte(s),
            ns_per_byte(l)
        );
    }
    println!("(ns per byte, the median of 5 runs)");
}

fn ns_per_byte(text: &str) -> f64 {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(mask_text(std::hint::black_box(text)));
            t.elapsed().as_nanos() as f64 / text.len() as f64
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[2]
}

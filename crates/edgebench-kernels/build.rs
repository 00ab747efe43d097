//! Which of the x86_64 microkernels the CPU building the crate has: their tests run where it
//! has them and are reported as ignored where it has not.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(host_avx512f)");
    println!("cargo::rustc-check-cfg=cfg(host_avx2_fma)");
    println!("cargo::rerun-if-changed=build.rs");
    let target_is_host = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    #[cfg(target_arch = "x86_64")]
    if target_is_host {
        if std::is_x86_feature_detected!("avx512f") {
            println!("cargo::rustc-cfg=host_avx512f");
        }
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            println!("cargo::rustc-cfg=host_avx2_fma");
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = target_is_host;
}

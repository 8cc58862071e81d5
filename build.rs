//! Packs the binaries' relative relocations (`-z pack-relative-relocs`, DT_RELR) where the C
//! library that starts them can apply them.
//!
//! Every command is a process of its own, so start-up is the hot path. A position-independent
//! binary is relocated as it starts: about 10,800 relative relocations, 260 KiB of table read
//! at every start. Packed, the table is 2.7 KiB: a `bind` run again and again takes 36 page
//! faults fewer (2.02 -> 1.79 ms); run after other programs, about 5 fewer, within the noise
//! in time (`benches/RESULTS.md`, 2026-11-24 23:59).
//!
//! glibc applies packed relocations from 2.36 on. An older glibc, statically linked, would start
//! a binary whose pointers were never relocated, so the flag is passed only when the glibc this
//! build links is 2.36 or newer: a native build on glibc (the host's glibc is the one linked).
//! Elsewhere (musl, a cross build, an older glibc) nothing changes.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target == host && target.ends_with("-linux-gnu") && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg=-Wl,-z,pack-relative-relocs");
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_at_least(major: u32, minor: u32) -> bool {
    extern "C" {
        fn gnu_get_libc_version() -> *const std::ffi::c_char;
    }
    // SAFETY: glibc returns a pointer to a static, NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
    let mut parts = version
        .to_str()
        .unwrap_or_default()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let have = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    have >= (major, minor)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_at_least(_major: u32, _minor: u32) -> bool {
    false
}

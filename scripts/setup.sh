#!/usr/bin/env bash
# Installs what building percolate needs beyond the Rust toolchain:
# libclang, which rocksdb's bindgen loads at build time. Idempotent.
set -euo pipefail

# libclang itself (libclang.so, libclang-14.so.1), not libclang-cpp, which
# some images carry without it.
have_libclang() {
    ldconfig -p 2>/dev/null | grep -Eq 'libclang(-[0-9.]+)?\.so' ||
        compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null ||
        compgen -G '/usr/lib/llvm-*/lib/libclang-[0-9]*.so*' >/dev/null
}

if ! have_libclang; then
    echo "setup: installing libclang-dev (needed by rocksdb's bindgen)" >&2
    sudo_cmd=""
    if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq libclang-dev >/dev/null
fi

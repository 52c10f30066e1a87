#!/usr/bin/env bash
# The Debian packages of `make package` (Note [Debian packages] in
# cmake/KilnPackage.cmake), installed the way a user would, without touching
# this machine:
#
#   tools/package_check.sh PACKAGE_DIR EXAMPLES_DIR     (as root: make test-package)
#
# Note [Package check in an overlay]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# In a private mount namespace (unshare --mount) the script lays an overlay
# over / whose writable layer is a tmpfs, and chroots into it: apt-get and
# dpkg write their files, database and caches into the tmpfs, and when the
# namespace's last process exits every mount in it goes, so the machine's
# own / is never written (checked at the end: no kiln package, no
# /usr/bin/kiln). Inside: `apt-get install ./kiln_*.deb ...` (apt resolves
# each Depends as on a user's machine: after `make deps` all are installed;
# apt's --no-download cannot be used, it refuses local .deb files); each
# package's Depends names the Debian libraries it loads; no library of
# /usr/bin/kiln unresolved; `kiln --version`, `kiln demo`, `kiln pretrain
# --max-steps 5`; examples/ configured with find_package(kiln) from /usr
# alone, built and fit_line run; then `apt-get purge` leaves no kiln file.
set -euo pipefail

if [[ ${1:-} == --inside ]]; then
  # ---- in the namespace: build the overlay, run the checks chrooted ---------
  pkgdir=$2 examples=$3 top=$4
  mount -t tmpfs -o size=4g kiln-package-check "$top"
  mkdir -p "$top/upper" "$top/work" "$top/root"
  mount -t overlay overlay -o "lowerdir=/,upperdir=$top/upper,workdir=$top/work" "$top/root"
  for fs in proc sys dev; do mount --rbind "/$fs" "$top/root/$fs"; done
  mount -t tmpfs tmpfs "$top/root/tmp"
  mkdir -p "$top/root/tmp/debs" "$top/root/tmp/examples"
  cp "$pkgdir"/*.deb "$top/root/tmp/debs/"
  cp -r "$examples/." "$top/root/tmp/examples/"
  exec chroot "$top/root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LANG=C.UTF-8 \
    ${OMP_NUM_THREADS:+OMP_NUM_THREADS="$OMP_NUM_THREADS"} bash -euo pipefail -c '
    cd /tmp/debs
    echo "package_check: installing" *.deb
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/debs/*.deb >/tmp/apt.log 2>&1 ||
      { cat /tmp/apt.log; echo "package_check: apt-get install failed"; exit 1; }
    for deb in ./*.deb; do
      name=$(dpkg-deb -f "$deb" Package)
      dpkg -s "$name" | grep -q "^Status: install ok installed" || { echo "package_check: $name not installed"; exit 1; }
      echo "package_check: $name $(dpkg-deb -f "$deb" Version): Depends: $(dpkg-deb -f "$deb" Depends)"
    done
    deps=$(dpkg-deb -f ./kiln_*.deb Depends)
    for want in libc6 libstdc++6 libopenblas libdnnl2 libonig5 libutf8proc libprotobuf-lite libisal2; do
      [[ $deps == *"$want"* ]] || { echo "package_check: kiln does not depend on $want: $deps"; exit 1; }
    done
    [[ $(dpkg-deb -f ./kiln-dev_*.deb Depends) == *"kiln (= "* ]] || { echo "package_check: kiln-dev does not depend on kiln"; exit 1; }
    if ldd /usr/bin/kiln | grep "not found"; then echo "package_check: /usr/bin/kiln: unresolved libraries"; exit 1; fi
    kiln --version
    kiln info | head -n 8
    cd /tmp
    kiln demo >demo.log 2>&1 || { cat demo.log; echo "package_check: kiln demo failed"; exit 1; }
    tail -n 2 demo.log
    kiln pretrain --max-steps 5 --output-dir /tmp/pretrain >pretrain.log 2>&1 ||
      { cat pretrain.log; echo "package_check: kiln pretrain --max-steps 5 failed"; exit 1; }
    [[ -f /tmp/pretrain/model.safetensors && -f /tmp/pretrain/config.json ]] ||
      { cat pretrain.log; echo "package_check: kiln pretrain wrote no model"; exit 1; }
    echo "package_check: kiln pretrain --max-steps 5 wrote /tmp/pretrain"
    cmake -S /tmp/examples -B /tmp/example-build -G Ninja >cmake.log 2>&1 ||
      { cat cmake.log; echo "package_check: examples/ does not configure against the installed kiln-dev"; exit 1; }
    grep -q "^kiln_DIR:PATH=/usr/lib/cmake/kiln" /tmp/example-build/CMakeCache.txt ||
      { grep kiln_DIR /tmp/example-build/CMakeCache.txt; echo "package_check: examples/ found kiln elsewhere"; exit 1; }
    cmake --build /tmp/example-build >build.log 2>&1 || { cat build.log; echo "package_check: examples/ does not build"; exit 1; }
    /tmp/example-build/fit_line | tail -n 1
    echo "package_check: examples/ built against /usr/lib/cmake/kiln, fit_line ran"
    names=$(for deb in /tmp/debs/*.deb; do dpkg-deb -f "$deb" Package; done)
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $names >/tmp/purge.log 2>&1 || { cat /tmp/purge.log; exit 1; }
    left=$(ls /usr/bin/kiln /usr/lib/libkiln*.so /usr/include/kiln /usr/lib/cmake/kiln 2>/dev/null || true)
    [[ -z $left ]] || { echo "package_check: apt-get purge left: $left"; exit 1; }
    echo "package_check: apt-get purge removed every kiln file"
  '
fi

# ---- outside: check the inputs, run the above in a private mount namespace ---
[[ $# -eq 2 ]] || { echo "usage: $0 PACKAGE_DIR EXAMPLES_DIR" >&2; exit 2; }
pkgdir=$(realpath "$1")
examples=$(realpath "$2")
[[ $(id -u) -eq 0 ]] || { echo "package_check: needs root (a mount namespace and chroot): run it with sudo" >&2; exit 1; }
compgen -G "$pkgdir/kiln_*.deb" >/dev/null && compgen -G "$pkgdir/kiln-dev_*.deb" >/dev/null ||
  { echo "package_check: no kiln_*.deb and kiln-dev_*.deb in $pkgdir (make package)" >&2; exit 1; }
[[ -f $examples/CMakeLists.txt ]] || { echo "package_check: $examples has no CMakeLists.txt" >&2; exit 1; }
if dpkg -s kiln >/dev/null 2>&1 || [[ -e /usr/bin/kiln ]]; then
  echo "package_check: a kiln package or /usr/bin/kiln is already on this machine; the check could not tell" \
       "its install from the machine's" >&2
  exit 1
fi
top=$(mktemp -d /tmp/kiln-package-check.XXXXXX)
status=0
unshare --mount --propagation private -- "$0" --inside "$pkgdir" "$examples" "$top" || status=$?
rmdir "$top" 2>/dev/null || true
# The machine is as it was.
if dpkg -s kiln >/dev/null 2>&1 || [[ -e /usr/bin/kiln || -e /usr/lib/libkiln.so ]]; then
  echo "package_check: kiln is installed on this machine after the check: the overlay leaked" >&2
  exit 1
fi
[[ $status -eq 0 ]] || { echo "package_check: FAILED (status $status)" >&2; exit "$status"; }
echo "package_check: all package checks passed; this machine is unchanged"

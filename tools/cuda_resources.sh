#!/usr/bin/env bash
# tools/cuda_resources.sh: static resource figures of every kernel in the
# built CUDA backend (libkiln_cuda.so, or nvcc's .o files, or a .cubin), read
# from the sm_90 code in the binary itself: registers, stack frame, spill
# stores/loads, static shared memory, and the theoretical occupancy on sm_90
# at the block size kiln launches the kernel with. Exit status 1, with a line
# naming the kernel, when any kernel spills, uses more than 255 registers or
# 48 KiB of static shared memory, or could not be launched at its block size
# (registers x block over the 64K per block, launch bounds below the block);
# 0 otherwise; 2 for a usage or input error.
#
#   tools/cuda_resources.sh [options] build/lib/libkiln_cuda.so   (or X.o ...)
#     --source DIR      kiln's source tree, for the launch sites (default: this script's ..)
#     --ptxas PATH      ptxas of the toolkit that built the library (default: CUDA_HOME,
#                       then nvcc's folder on PATH, then /usr/local/cuda/bin)
#     --write-doc FILE  also replace the generated section of FILE (docs/gpu.md)
#     --verify          run ptxas -v on every module's PTX and require its figures to
#                       equal the ones read from the binary (slow: a minute or so)
#     --list            print every instantiation, not one line per kernel
# ctest runs it on the built library (test cuda_resources, tests/cuda.cmake).
#
# Note [Kernel resources without cuobjdump]
# The CUDA toolkit on kiln's machines (and CI's) has nvcc and ptxas but no
# cuobjdump or nvdisasm, so this reads the binary itself (python3's standard
# library; zstd through the system's libzstd.so.1):
# - the host ELF's .nv_fatbin section holds one fatbin container per .cu file,
#   each with the file's PTX and its sm_90 cubin (an ELF of its own); nvcc 13
#   compresses entries with zstd;
# - in the cubin, the .nv.info section's EIATTR_REGCOUNT and EIATTR_FRAME_SIZE
#   give each function's registers and stack frame (ptxas -v's "Used N
#   registers" and "N bytes stack frame"); .nv.info.<kernel> holds
#   EIATTR_MAX_THREADS (__launch_bounds__); the size of .nv.shared.<kernel>
#   is the static shared memory plus the 1 KiB sm_90 reserves per block (the
#   figure ptxas -v and cudaFuncGetAttributes report is that size less 1 KiB).
# - Spills: the binary records no spill counts, but a spill is a store to the
#   stack frame, so a function whose frame is 0 bytes has none. For a module
#   where some function has a frame (a local array, or spills), the script runs
#   the build's ptxas, with the options the cubin records (.note.nv.tkinfo),
#   on that module's PTX from the same fatbin and takes ptxas -v's spill
#   stores/loads, after checking that ptxas reproduced the build's registers
#   and frame for every kernel of the module (ptxas is deterministic). So the
#   test compiles nothing in the usual case, and a second time only what needs
#   it. --verify does this for every module, to check the reading above.
# Compared with ptxas -v on kiln's 11 .cu files (CUDA 13.0): every one of
# 679 functions had the same registers and frame, and every kernel's shared
# memory differed by exactly the 1 KiB.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=$(command -v python3 || echo /usr/bin/python3)
exec "$py" - "$here/.." "$@" <<'PYTHON'
import argparse, ctypes, datetime, glob, os, re, shutil, struct, subprocess, sys, tempfile

# ---- sm_90 (Hopper: H100, H200) limits, as cuda_occupancy.h models them -------
SM = 90
REGS_PER_SM = 65536            # 32-bit registers per SM, 16384 in each of 4 sub-partitions
REGS_PER_BLOCK = 65536         # a block may hold them all
REGS_PER_THREAD = 255          # ptxas's ceiling
REG_UNIT = 256                 # registers are allocated per warp in units of 256
SUB_PARTITIONS = 4
THREADS_PER_SM = 2048          # 64 warps
BLOCKS_PER_SM = 32
THREADS_PER_BLOCK = 1024
SMEM_PER_SM = 228 * 1024       # shared memory per SM at the largest carveout
SMEM_RESERVED = 1024           # reserved by the system per block (sm_80+)
SMEM_UNIT = 128                # shared memory allocation granularity
STATIC_SMEM_PER_BLOCK = 48 * 1024
WARP = 32

# ---- block sizes -----------------------------------------------------------
# Every kiln launch is KILN_LAUNCH(grid, block, smem, stream, kernel<...>)(args)
# in cuda/*.cu and cuda/*.cuh; the block argument is an integer, a constexpr
# int of the file (kThreads = 256), or one of these computed sizes, each
# checked against the source text that computes it (a change there fails the
# check until this table follows). The occupancy is reported at the largest.
BLOCK_RULES = {
    # expression: (smallest, largest, file, source lines that compute it)
    'threads_for(C)': (32, 512, 'cuda/row_kernels.cuh',
                       ['int t = 32;', 'while (t < 512 && t * 4 < C) t *= 2;']),
    'threads': (32, 256, 'cuda/reduce.cu',
                ['int threads = 32;', 'while (threads < 256 && threads < R) threads *= 2;']),
}
# Kernels of CUDA's own libraries compiled into the backend (CCCL's CUB, for
# cub::DeviceRadixSort and cub::DeviceSegmentedSort) run at their
# __launch_bounds__ (EIATTR_MAX_THREADS); those without are listed here.
LIBRARY_KERNELS = {
    'cub::DeviceRadixSortExclusiveSumKernel':
        (256, 'launched with ExclusiveSumPolicy::BLOCK_THREADS, 256 in every policy of '
              'cub/device/dispatch/tuning/tuning_radix_sort.cuh'),
    'cub::DeviceThreeWayPartitionInitKernel':
        (256, 'launched with INIT_KERNEL_THREADS, 256 in cub/device/dispatch/dispatch_three_way_partition.cuh '
              '(cub::DeviceSegmentedSort partitions the segments with it)'),
    'cub::EmptyKernel':
        (None, 'never launched: CUB reads its attributes to learn the PTX version'),
}

EIATTR_MAX_THREADS, EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x05, 0x11, 0x2f
STO_CUDA_ENTRY = 0x10


class Failure(Exception):
    pass


def die(msg, code=2):
    print('cuda_resources: ' + msg, file=sys.stderr)
    sys.exit(code)

# ---- ELF, fatbin ------------------------------------------------------------

def elf_sections(d, what):
    if d[:4] != b'\x7fELF' or d[4] != 2 or d[5] != 1:
        raise Failure(what + ': not a 64-bit little-endian ELF file')
    shoff, = struct.unpack_from('<Q', d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3a)
    shs = []
    for i in range(shnum):
        name, typ, flags, _, off, size, link, info, _, _ = struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize)
        shs.append(dict(name=name, type=typ, off=off, size=size, link=link, info=info))
    base = shs[shstrndx]['off']
    for s in shs:
        s['name'] = d[base + s['name']:d.index(b'\0', base + s['name'])].decode('utf-8', 'replace')
    return shs


_zstd = None
def unzstd(blob, size, what):
    global _zstd
    if _zstd is None:
        try:
            _zstd = ctypes.CDLL('libzstd.so.1')
        except OSError:
            raise Failure(what + ': the fatbin is zstd-compressed and libzstd.so.1 is missing (Debian: libzstd1)')
        _zstd.ZSTD_decompress.restype = ctypes.c_size_t
        _zstd.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        _zstd.ZSTD_isError.argtypes = [ctypes.c_size_t]
    buf = ctypes.create_string_buffer(size)
    r = _zstd.ZSTD_decompress(buf, size, blob, len(blob))
    if _zstd.ZSTD_isError(r) or r != size:
        raise Failure(what + ': a fatbin entry does not decompress')
    return buf.raw


def modules(path):
    """[(module name, cubin bytes, ptx text or None)] of the sm_90 code in path."""
    d = open(path, 'rb').read()
    shs = elf_sections(d, path)
    if struct.unpack_from('<H', d, 0x12)[0] == 190:  # EM_CUDA: a cubin itself
        return [(os.path.basename(path), d, None)], set()
    out, other = [], set()
    for s in shs:
        if s['name'] != '.nv_fatbin':
            continue
        fb = d[s['off']:s['off'] + s['size']]
        p = 0
        while p + 16 <= len(fb):
            magic, _, hsz, size = struct.unpack_from('<IHHQ', fb, p)
            if magic != 0xBA55ED50:
                p += 8  # containers are 8-byte aligned in the section
                continue
            q, end = p + hsz, p + hsz + size
            cubin = ptx = None
            while q + 64 <= end:
                kind, _, ehsz, psize = struct.unpack_from('<HHIQ', fb, q)
                csize, = struct.unpack_from('<I', fb, q + 16)
                arch, = struct.unpack_from('<I', fb, q + 28)
                usize, = struct.unpack_from('<Q', fb, q + 56)
                blob = fb[q + ehsz:q + ehsz + psize]
                if blob[:4] == b'\x28\xb5\x2f\xfd':
                    blob = unzstd(blob[:csize], usize, path)
                elif csize:
                    raise Failure(path + ': a fatbin entry is compressed in a format this script does not read '
                                  '(only zstd, nvcc 13\'s default)')
                if arch != SM:
                    other.add(arch)
                elif kind == 2:
                    cubin = blob
                elif kind == 1:
                    ptx = blob.rstrip(b'\0').decode('utf-8', 'replace')
                q += ehsz + psize
            if cubin is not None:
                out.append((None, cubin, ptx))
            p = end
    return out, other


def cubin_functions(cb, what):
    shs = elf_sections(cb, what)
    by_name = {s['name']: s for s in shs}
    arch = (struct.unpack_from('<I', cb, 0x30)[0] >> 8) & 0xff
    symtab = next((s for s in shs if s['type'] == 2), None)
    if symtab is None or '.nv.info' not in by_name:
        return {}, arch, ''  # no functions (nvcc -shared adds such an empty module)
    strtab = shs[symtab['link']]
    syms = []
    for i in range(symtab['size'] // 24):
        nm, info, other, shndx, _, _ = struct.unpack_from('<IBBHQQ', cb, symtab['off'] + 24 * i)
        o = strtab['off'] + nm
        syms.append((cb[o:cb.index(b'\0', o)].decode('utf-8', 'replace'), info, other))

    def records(s):
        d = cb[s['off']:s['off'] + s['size']]
        p = 0
        while p + 4 <= len(d):
            fmt, attr = d[p], d[p + 1]
            if fmt == 4:  # EIFMT_SVAL: u16 size, payload
                n, = struct.unpack_from('<H', d, p + 2)
                yield attr, d[p + 4:p + 4 + n]
                p += 4 + n
            else:         # EIFMT_NVAL/BVAL/HVAL: a 2-byte value
                yield attr, d[p + 2:p + 4]
                p += 4

    per_sym = {}
    for attr, v in records(by_name['.nv.info']):
        if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(v) == 8:
            si, val = struct.unpack('<II', v)
            per_sym.setdefault(syms[si][0], {})[attr] = val
    funcs = {}
    for name, info, other in syms:
        if info & 0xf != 2:  # STT_FUNC
            continue
        a = per_sym.get(name, {})
        f = dict(name=name, entry=bool(other & STO_CUDA_ENTRY), regs=a.get(EIATTR_REGCOUNT),
                 frame=a.get(EIATTR_FRAME_SIZE, 0), maxntid=None, spill=None)
        sh = by_name.get('.nv.shared.' + name)
        f['smem'] = max(0, sh['size'] - SMEM_RESERVED) if sh else 0
        if sh and sh['size'] < SMEM_RESERVED:
            raise Failure('%s: .nv.shared of %s is %d bytes, less than the 1 KiB sm_90 reserves: '
                          'the cubin layout is not the one this script reads' % (what, name, sh['size']))
        lo = by_name.get('.nv.local.' + name)
        f['frame'] += lo['size'] if lo else 0
        inf = by_name.get('.nv.info.' + name)
        if inf:
            for attr, v in records(inf):
                if attr == EIATTR_MAX_THREADS and len(v) == 12:
                    x, y, z = struct.unpack('<III', v)
                    f['maxntid'] = x * y * z
        if f['entry'] and f['regs'] is None:
            raise Failure('%s: kernel %s has no EIATTR_REGCOUNT' % (what, name))
        funcs[name] = f
    tk = by_name.get('.note.nv.tkinfo')
    tkinfo = cb[tk['off']:tk['off'] + tk['size']].decode('latin-1') if tk else ''
    return funcs, arch, tkinfo

def internal(f):
    """A subroutine ptxas made inside a kernel ($__internal_N_$__cuda_sm20_div_s64, ...$__internal_trig_
    reduction_slowpathd): it shares its kernel's stack frame (the same EIATTR_FRAME_SIZE), and ptxas -v counts
    its spills in the kernel's figures, reporting none of its own."""
    return not f['entry'] and f['name'].startswith('$')

# ---- ptxas, for spills --------------------------------------------------------

def find_ptxas(given):
    if given:
        return given if os.access(given, os.X_OK) else None
    cands = []
    if os.environ.get('CUDA_HOME'):
        cands.append(os.path.join(os.environ['CUDA_HOME'], 'bin', 'ptxas'))
    nvcc = shutil.which('nvcc')
    if nvcc:
        cands.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), 'ptxas'))
    cands += ['/usr/local/cuda/bin/ptxas', shutil.which('ptxas') or '']
    return next((c for c in cands if c and os.access(c, os.X_OK)), None)


def tk_fields(tkinfo):
    """(tool, version line, options) that the cubin's .note.nv.tkinfo records."""
    strs = [s for s in re.split(r'\x00+', tkinfo) if s.strip()]
    i = next((k for k, s in enumerate(strs) if s.endswith('ptxas')), None)
    if i is None or i + 3 >= len(strs):
        return None, None, None
    return 'ptxas', strs[i + 1], strs[i + 3]


def ptxas_figures(ptxas, ptx, options, what):
    """ptxas -v on ptx with the build's options: {function: {regs, frame, st, ld, smem}}."""
    opts, toks, skip = [], options.split(), False
    for t in toks:
        if skip:
            skip = False
            continue
        if t in ('-o', '--output-file'):
            skip = True
            continue
        if t in ('-v', '--verbose') or t.endswith('.ptx'):
            continue
        opts.append(t)
    with tempfile.TemporaryDirectory(prefix='cuda_resources.') as tmp:
        src = os.path.join(tmp, 'module.ptx')
        open(src, 'w').write(ptx)
        r = subprocess.run([ptxas] + opts + ['-v', src, '-o', os.path.join(tmp, 'module.cubin')],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise Failure('%s: ptxas failed on the module\'s PTX:\n%s' % (what, r.stdout[-2000:]))
    res, cur = {}, None
    for line in r.stdout.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line) or re.search(r'Function properties for (\S+)', line)
        if m:
            cur = res.setdefault(m.group(1), {})
            continue
        m = re.search(r'(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads', line)
        if m and cur is not None:
            cur.update(frame=int(m[1]), st=int(m[2]), ld=int(m[3]))
            continue
        m = re.search(r'Used (\d+) registers', line)
        if m and cur is not None:
            cur['regs'] = int(m[1])
            s = re.search(r'(\d+) bytes smem', line)
            cur['smem'] = int(s[1]) if s else 0
    return res

# ---- names -------------------------------------------------------------------

def demangle(names):
    if not names:
        return {}
    cxxfilt = shutil.which('c++filt')
    if not cxxfilt:
        return {n: n for n in names}
    r = subprocess.run([cxxfilt], input='\n'.join(names) + '\n', stdout=subprocess.PIPE, text=True, check=True)
    out = r.stdout.split('\n')
    return {n: out[i] for i, n in enumerate(names)}


OPEN, CLOSE = '<({[', '>)}]'

def top_level(s, chars):
    """Indices in s of chars at nesting depth 0 (<>, (), {}, [])."""
    depth, idx = 0, []
    for i, c in enumerate(s):
        if c in chars and depth == 0:
            idx.append(i)
        if c in OPEN:
            depth += 1
        elif c in CLOSE:
            depth -= 1
    return idx


def split_name(dem):
    """'void ns::f<A, B>(args)' -> (qualified name 'ns::f', template args 'A, B')."""
    s = dem.replace('(anonymous namespace)', '{anon}')
    s = re.sub(r'\b[A-Z]+_\d+_SM_\d+(?:_NS)?::', '', s)  # CCCL's versioned inline namespaces
    paren = top_level(s, '(')
    head = s[:paren[0]] if paren else s
    spaces = top_level(head, ' ')
    if spaces:
        head = head[spaces[-1] + 1:]  # drop the return type
    lt = top_level(head, '<')
    base, targs = (head[:lt[0]], head[lt[0] + 1:head.rindex('>')]) if lt else (head, '')
    return base.replace('{anon}::', ''), targs.replace('{anon}::', '')


def short_args(targs):
    t = re.sub(r'\bkiln::(cuda::)?(kernels::)?', '', targs)
    t = re.sub(r'\bcub::(detail::)?(\w+::)?', '', t)
    return t if len(t) <= 90 else t[:87] + '...'


def anon_file(mangled):
    """The .cu file of a kernel in an anonymous namespace, from its mangled name."""
    m = re.search(r'_GLOBAL__N__[0-9a-f]+_(\d+)_', mangled)
    if not m:
        return None
    stem = mangled[m.end():m.end() + int(m[1])]
    return stem[:-3] + '.cu' if stem.endswith('_cu') else None

# ---- launch sites --------------------------------------------------------------

def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def launch_sites(src, failures):
    files = sorted(glob.glob(os.path.join(src, 'cuda', '*.cu')) + glob.glob(os.path.join(src, 'cuda', '*.cuh')))
    if not files:
        raise Failure('no cuda/*.cu under %s (--source)' % src)
    texts = {os.path.relpath(f, src): strip_comments(open(f).read()) for f in files}
    sites = {}
    for rel, text in texts.items():
        for m in re.finditer(r'\bKILN_LAUNCH\s*\(', text):
            line_start = text.rfind('\n', 0, m.start()) + 1
            if text[line_start:m.start()].lstrip().startswith('#'):
                continue  # the macro's definition
            depth, i = 1, m.end()
            while depth:
                depth += {'(': 1, ')': -1}.get(text[i], 0)
                i += 1
            args = text[m.end():i - 1]
            cuts, depth = [], 0
            for k, c in enumerate(args):
                depth += {'(': 1, ')': -1}.get(c, 0)
                if c == ',' and depth == 0 and len(cuts) < 4:
                    cuts.append(k)
            line = text.count('\n', 0, m.start()) + 1
            if len(cuts) < 4:
                raise Failure('%s:%d: KILN_LAUNCH with fewer than 5 arguments' % (rel, line))
            block = re.sub(r'\s+', '', args[cuts[0] + 1:cuts[1]])
            kernel = re.match(r'\s*(?:::)?([A-Za-z_]\w*(?:::\w+)*)', args[cuts[3] + 1:]).group(1).split('::')[-1]
            try:
                lo, hi = block_size(block, rel, line, texts)
            except Failure as e:
                failures.append('kernel %s: %s' % (kernel, e))
                lo = hi = None
            sites.setdefault(kernel, []).append(dict(file=rel, line=line, expr=block, lo=lo, hi=hi))
    return sites


def block_size(expr, rel, line, texts):
    if re.fullmatch(r'\d+', expr):
        return int(expr), int(expr)
    if expr in BLOCK_RULES:
        lo, hi, where, lines = BLOCK_RULES[expr]
        flat = re.sub(r'\s+', ' ', texts.get(where, ''))
        missing = [l for l in lines if re.sub(r'\s+', ' ', l) not in flat]
        # the rule's file is the launching one, or a header it includes ("cuda/row_kernels.cuh")
        included = where == rel or ('#include "%s"' % where) in texts.get(rel, '')
        if not included or missing:
            raise Failure('%s:%d: block size %s: BLOCK_RULES in tools/cuda_resources.sh says it is computed in %s '
                          'by %s; the source no longer says so: update the table' % (rel, line, expr, where, missing or lines))
        return lo, hi
    if re.fullmatch(r'[A-Za-z_]\w*', expr):
        pat = r'\bconstexpr\s+int\s+' + expr + r'\s*=\s*(\d+)\s*;'
        own = re.findall(pat, texts[rel])
        vals = set(own) or {v for t in texts.values() for v in re.findall(pat, t)}
        if len(vals) == 1:
            v = int(vals.pop())
            return v, v
    raise Failure('%s:%d: block size "%s" is neither an integer, a constexpr int of cuda/, nor in BLOCK_RULES of '
                  'tools/cuda_resources.sh: add it there' % (rel, line, expr))

# ---- occupancy (cuda_occupancy.h's model for compute capability 9.0) ------------

def occupancy(regs, smem, block):
    """(blocks per SM, occupancy fraction, limiting resource); 0 blocks: the launch fails."""
    warps = -(-block // WARP)
    per_warp = -(-regs * WARP // REG_UNIT) * REG_UNIT
    assumed = per_warp * (-(-warps // SUB_PARTITIONS) * SUB_PARTITIONS)
    if block > THREADS_PER_BLOCK:
        return 0, 0.0, 'block over 1024 threads'
    if regs > REGS_PER_THREAD or per_warp * warps > REGS_PER_BLOCK or assumed > REGS_PER_BLOCK:
        return 0, 0.0, 'registers'
    smem_cta = -(-(smem + SMEM_RESERVED) // SMEM_UNIT) * SMEM_UNIT
    if smem_cta > STATIC_SMEM_PER_BLOCK + SMEM_RESERVED:
        return 0, 0.0, 'shared memory'
    limits = {
        'warps': THREADS_PER_SM // WARP // warps,
        'blocks': BLOCKS_PER_SM,
        'registers': (REGS_PER_SM // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS // warps,
        'shared memory': SMEM_PER_SM // smem_cta,
    }
    blocks = min(limits.values())
    limiter = next(k for k in ('warps', 'blocks', 'shared memory', 'registers') if limits[k] == blocks)
    return blocks, blocks * warps * WARP / THREADS_PER_SM, limiter

# ---- the check -------------------------------------------------------------------

def analyse(args):
    src = os.path.abspath(args.source)
    kernels, failures, notes = [], [], []
    sites = launch_sites(src, failures)
    ptxas = find_ptxas(args.ptxas)
    other_archs, versions, n_modules = set(), set(), 0
    for path in args.inputs:
        if not os.path.isfile(path):
            raise Failure('no such file: ' + path)
        mods, other = modules(path)
        other_archs |= other
        for k, (name, cubin, ptx) in enumerate(mods):
            what = '%s (module %d)' % (path, k)
            funcs, arch, tkinfo = cubin_functions(cubin, what)
            if not funcs:
                continue
            if arch != SM:
                other_archs.add(arch)
                continue
            n_modules += 1
            tool, version, options = tk_fields(tkinfo)
            if version:
                versions.add(version)
            framed = [f for f in funcs.values() if f['frame'] > 0 and not internal(f)]
            if framed or args.verify:
                if ptx is None or not ptxas or options is None:
                    why = ('the library holds no PTX for its module' if ptx is None else
                           'no ptxas found (--ptxas)' if not ptxas else 'the cubin records no ptxas options')
                    for f in framed:
                        f['spill'] = 'unknown'
                        failures.append('%s: %s has a %d-byte stack frame, and whether it spills cannot be told: %s'
                                        % (what, f['name'], f['frame'], why))
                    if not framed:
                        notes.append('%s: not verified: %s' % (what, why))
                else:
                    fig = ptxas_figures(ptxas, ptx, options, what)
                    for f in funcs.values():
                        if internal(f):
                            continue
                        p = fig.get(f['name'])
                        if p is None:
                            if f['entry'] or f['frame']:
                                failures.append('%s: ptxas -v on the module\'s PTX did not report %s' % (what, f['name']))
                            continue
                        same = p.get('frame') == f['frame'] and (not f['entry'] or (
                            p.get('regs') == f['regs'] and p.get('smem') == f['smem']))
                        if not same:
                            failures.append('%s: ptxas on the PTX did not reproduce the build\'s code for %s '
                                            '(binary: %s regs, %s B frame, %s B smem; ptxas: %s): spills unknown' %
                                            (what, f['name'], f['regs'], f['frame'], f['smem'], p))
                            f['spill'] = 'unknown'
                        else:
                            f['spill'] = (p.get('st', 0), p.get('ld', 0))
            for f in funcs.values():
                if internal(f):
                    continue
                if f['spill'] is None:
                    f['spill'] = (0, 0) if f['frame'] == 0 else 'unknown'
                if not f['entry'] and f['spill'] not in ((0, 0), 'unknown'):
                    failures.append('%s: device function %s spills: %d bytes stored, %d bytes loaded'
                                    % ((what, f['name']) + f['spill']))
                if f['entry']:
                    f['module'] = what
                    kernels.append(f)
    if not kernels:
        raise Failure('no sm_90 kernels in %s%s' % (', '.join(args.inputs),
                      ' (code for sm_%s only)' % ', sm_'.join(map(str, sorted(other_archs))) if other_archs else ''))
    if other_archs:
        notes.append('code for sm_%s not checked (sm_90 only)' % ', sm_'.join(map(str, sorted(other_archs))))

    dem = demangle([f['name'] for f in kernels])
    for f in kernels:
        f['demangled'] = dem[f['name']]
        f['base'], f['targs'] = split_name(f['demangled'])
        last = f['base'].split('::')[-1]
        f['kiln'] = f['base'].startswith('kiln::')
        f['short'] = last if f['kiln'] else f['base'].split('::')[0] + '::' + last
        f['sites'] = []
        f['block'] = None
        if f['kiln']:
            cands = sites.get(last, [])
            own = anon_file(f['name']) if '(anonymous namespace)' in f['demangled'].split('<')[0] else None
            if own:
                cands = [s for s in cands if os.path.basename(s['file']) == own]
            if not cands:
                failures.append('%s: kernel %s has no KILN_LAUNCH site in %s' %
                                (f['module'], f['demangled'], own or 'cuda/'))
                continue
            f['sites'] = cands
            if all(s['hi'] for s in cands):  # else reported with the launch site
                f['block'] = (min(s['lo'] for s in cands), max(s['hi'] for s in cands))
        elif f['maxntid']:
            f['block'] = (f['maxntid'], f['maxntid'])
            f['block_note'] = '__launch_bounds__'
        elif f['short'] in LIBRARY_KERNELS:
            b, why = LIBRARY_KERNELS[f['short']]
            f['block'] = (b, b) if b else None
            f['block_note'] = why
        else:
            failures.append('%s: kernel %s is not kiln\'s, has no __launch_bounds__ and no entry in LIBRARY_KERNELS '
                            'of tools/cuda_resources.sh: add its block size there' % (f['module'], f['demangled']))
    # limits
    for f in kernels:
        who = 'kernel %s' % f['demangled']
        if f['spill'] == 'unknown':
            pass  # reported above
        elif f['spill'] != (0, 0):
            failures.append('%s spills: %d bytes stored, %d bytes loaded (stack frame %d bytes)' %
                            ((who,) + f['spill'] + (f['frame'],)))
        if f['regs'] > REGS_PER_THREAD:
            failures.append('%s uses %d registers, over %d' % (who, f['regs'], REGS_PER_THREAD))
        if f['smem'] > STATIC_SMEM_PER_BLOCK:
            failures.append('%s has %d bytes of static shared memory, over 48 KiB' % (who, f['smem']))
        f['occ'] = f['occ_lo'] = None
        if f['block']:
            lo, hi = f['block']
            if f['maxntid'] and hi > f['maxntid']:
                failures.append('%s is launched with %d threads, over its __launch_bounds__ %d' % (who, hi, f['maxntid']))
            f['occ'] = occupancy(f['regs'], f['smem'], hi)
            if f['occ'][0] == 0:
                failures.append('%s cannot be launched with %d threads: %s (%d registers x %d threads; %d bytes shared)' %
                                (who, hi, f['occ'][2], f['regs'], hi, f['smem']))
            if lo != hi:
                f['occ_lo'] = occupancy(f['regs'], f['smem'], lo)
    used = {f['base'].split('::')[-1] for f in kernels if f['kiln']}
    for k, ss in sorted(sites.items()):
        if k not in used:
            notes.append('%s (launched at %s:%d) is not in the library: never instantiated?' % (k, ss[0]['file'], ss[0]['line']))
    return kernels, failures, notes, versions, n_modules


def pct(x):
    return re.sub(r'\.0$', '', '%.1f' % (x * 100)) + '%'


def groups(kernels):
    g = {}
    for f in kernels:
        g.setdefault((not f['kiln'], f['short'], f['base']), []).append(f)
    rows = []
    for (_, short, base), fs in sorted(g.items()):
        heavy = max(fs, key=lambda f: (f['regs'], f['smem'], f['frame']))
        sites = sorted({'%s:%d' % (os.path.basename(s['file']), s['line']) for f in fs for s in f['sites']})
        files = sorted({s.split(':')[0] for s in sites})
        rng = lambda vals: ('%d' % min(vals)) if min(vals) == max(vals) else '%d–%d' % (min(vals), max(vals))
        blocks = {f['block'] for f in fs}
        b = next(iter(blocks)) if len(blocks) == 1 else None
        if b is None:
            block = 'mixed'
        elif b[0] == b[1]:
            block = str(b[0])
        else:
            block = '%d–%d (%d used)' % (b[0], b[1], b[1])
        if not fs[0]['kiln'] and fs[0].get('block_note') == '__launch_bounds__' and b:
            block += ' (bounds)'
        if b is None and fs[0]['block'] is None:
            block = '—'
        occs = [f['occ'] for f in fs if f['occ']]
        if occs:
            lo = min(occs, key=lambda o: o[1])
            hi = max(o[1] for o in occs)
            occ = pct(hi) if hi == lo[1] else '%s–%s' % (pct(lo[1])[:-1], pct(hi))
            occ += ' (%s)' % lo[2]
            lows = [f['occ_lo'] for f in fs if f['occ_lo']]
            if lows and b:
                w = min(lows, key=lambda o: o[1])
                occ += '; at %d: %s' % (b[0], pct(w[1]))
        else:
            occ = '—'
        sp = [f['spill'] for f in fs]
        spill = '?' if 'unknown' in sp else '%d / %d' % (max(s[0] for s in sp), max(s[1] for s in sp))
        rows.append(dict(kernel=short, where=', '.join(sites) if sites else 'no launch site' if fs[0]['kiln'] else 'CCCL (cub)', files=files, n=len({f['name'] for f in fs}),
                         regs=rng([f['regs'] for f in fs]), frame=rng([f['frame'] for f in fs]), spill=spill,
                         smem=rng([f['smem'] for f in fs]), block=block, occ=occ,
                         heavy=short_args(heavy['targs']) if len({f['regs'] for f in fs}) > 1 else ''))
    return rows


COLS = [('kernel', 'kernel'), ('where', 'launched at'), ('block', 'block'), ('n', 'inst.'), ('regs', 'regs'),
        ('frame', 'stack B'), ('spill', 'spill st/ld B'), ('smem', 'static smem B'),
        ('occ', 'occupancy (limit)'), ('heavy', 'most registers')]


def markdown(rows, kernels, versions, n_modules, src, inputs, failures):
    def git(*a):
        r = subprocess.run(['git', '-C', src] + list(a), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return r.stdout.strip() if r.returncode == 0 else ''
    commit = git('rev-parse', '--short=12', 'HEAD') or 'unknown'
    if git('status', '--porcelain', '--', 'cuda'):
        commit += ' with uncommitted changes in cuda/'
    toolkit = '; '.join(sorted(versions)) or 'unknown'
    lines = [
        'Written by `tools/cuda_resources.sh --write-doc docs/gpu.md` (the ctest test `cuda_resources` runs the same '
        'check on every CUDA build) on %s from %s, source at commit %s; device code by %s. %d kernels '
        '(%d instantiations) in %d modules; every figure is sm_90\'s.' % (
            datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d'),
            ', '.join('`%s`' % os.path.basename(i) for i in inputs), commit, toolkit,
            len(rows), len({f['name'] for f in kernels}), n_modules),
        '',
        '| ' + ' | '.join(h for _, h in COLS) + ' |',
        '| ' + ' | '.join('---' for _ in COLS) + ' |',
    ]
    for r in rows:
        cells = []
        for k, _ in COLS:
            v = str(r[k]).replace('|', '\\|')
            cells.append('`%s`' % v if k in ('kernel', 'heavy') and v else v)
        lines.append('| ' + ' | '.join(cells) + ' |')
    lines += [''] + (['**The check fails:**', ''] + ['- ' + f.replace('|', '\\|') for f in failures] if failures else
                     ['No kernel spills, and every one fits sm_90\'s limits at its block size.'])
    lines += [
        '',
        'Registers, stack frame and static shared memory are read from the library\'s sm_90 cubins (Note '
        '[Kernel resources without cuobjdump] in the script); a range covers the template instantiations, and '
        '"most registers" names the heaviest when they differ. Spills: a kernel whose stack frame is 0 bytes cannot spill; for a '
        'module with a frame the script runs the build\'s ptxas on its PTX and takes ptxas -v\'s spill figures. '
        'Block: the block size of the kernel\'s `KILN_LAUNCH` (kThreads = 256; `threads_for(C)` in row_kernels.cuh '
        'is 32–512 and `threads` in reduce.cu 32–256 with the row length: occupancy at the largest, and after "at N" '
        'at the smallest, where the 32-blocks-per-SM limit caps it); CUB\'s kernels run at their '
        '`__launch_bounds__` ("bounds"). Occupancy: resident warps over 64 per SM, as cuda_occupancy.h computes it '
        'for sm_90 (65536 registers per SM allocated per warp in units of 256, 2048 threads and 32 blocks per SM, '
        '228 KiB shared per SM with 1 KiB reserved per block), with the resource that limits it. The check fails '
        'on any spill, over 255 registers or 48 KiB of static shared memory, or a launch that cannot fit.',
    ]
    return '\n'.join(lines) + '\n'


BEGIN, END = '<!-- cuda_resources: begin -->', '<!-- cuda_resources: end -->'
HEADING = '## Kernel resources (static, sm_90)'


def write_doc(path, body):
    for _ in range(5):
        with open(path, 'rb') as fh:
            before = fh.read()
        text = before.decode('utf-8')
        nb, ne = text.count(BEGIN), text.count(END)
        if nb == 0 and ne == 0:
            new = text + ('' if text.endswith('\n') else '\n') + '\n%s\n\n%s\n%s%s\n' % (HEADING, BEGIN, body, END)
        elif nb == 1 and ne == 1 and text.index(BEGIN) < text.index(END):
            b = text.index(BEGIN) + len(BEGIN)
            e = text.index(END)
            new = text[:b] + '\n' + body + text[e:]
        else:
            raise Failure('%s: the markers %s ... %s are not one well-formed pair: fix them by hand' % (path, BEGIN, END))
        if new == text:
            return False
        tmp = '%s.cuda_resources.%d' % (path, os.getpid())
        with open(tmp, 'w', encoding='utf-8') as fh:
            fh.write(new)
        shutil.copymode(path, tmp)
        with open(path, 'rb') as fh:
            unchanged = fh.read() == before
        if unchanged:
            os.replace(tmp, path)  # only the marked section differs from what was read
            return True
        os.unlink(tmp)  # someone wrote the file meanwhile: read it again
    raise Failure('%s keeps changing under the edit: try again' % path)


def main():
    src_default = sys.argv[1]
    ap = argparse.ArgumentParser(prog='tools/cuda_resources.sh', description=__doc__)
    ap.add_argument('inputs', nargs='+', help='libkiln_cuda.so, nvcc .o files or .cubin files')
    ap.add_argument('--source', default=src_default)
    ap.add_argument('--ptxas')
    ap.add_argument('--write-doc', metavar='FILE')
    ap.add_argument('--verify', action='store_true')
    ap.add_argument('--list', action='store_true')
    args = ap.parse_args(sys.argv[2:])
    try:
        kernels, failures, notes, versions, n_modules = analyse(args)
        rows = groups(kernels)
        if failures:  # name kernels as C++ does
            m = demangle(failures)
            failures = [m[f] for f in failures]
        if args.list:
            for f in sorted(kernels, key=lambda f: f['demangled']):
                o = f['occ']
                print('%4s regs %5s B frame %-9s spill %6d B smem block %-9s occ %-5s %s' % (
                    f['regs'], f['frame'], '%s/%s' % f['spill'] if f['spill'] != 'unknown' else '?', f['smem'],
                    '%s-%s' % f['block'] if f['block'] else '-', pct(o[1]) if o else '-', f['demangled']))
        else:
            widths = {k: max(len(h), max(len(str(r[k])) for r in rows)) for k, h in COLS if k != 'heavy'}
            hdr = [k for k, _ in COLS if k != 'heavy']
            print('  '.join(dict(COLS)[k].ljust(widths[k]) for k in hdr))
            for r in rows:
                print('  '.join(str(r[k]).ljust(widths[k]) for k in hdr))
        for n in notes:
            print('note: ' + n)
        if args.write_doc:
            changed = write_doc(args.write_doc, markdown(rows, kernels, versions, n_modules,
                                                         os.path.abspath(args.source), args.inputs, failures))
            print('%s: section %s' % (args.write_doc, 'rewritten' if changed else 'unchanged'))
        for f in failures:
            print('FAIL: ' + f, file=sys.stderr)
        verdict = 'FAILED (%d)' % len(failures) if failures else 'ok'
        print('cuda_resources: %d kernels, %d instantiations, %d module(s) (%s): %s' % (
            len(rows), len({f['name'] for f in kernels}), n_modules, '; '.join(sorted(versions)) or 'toolkit unknown', verdict))
        sys.exit(1 if failures else 0)
    except Failure as e:
        die(str(e))


main()
PYTHON

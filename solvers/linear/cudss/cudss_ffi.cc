// XLA FFI handlers over NVIDIA cuDSS 1.0: factor, refactor, solve and free of sparse LU
// factorizations whose state lives in a registry keyed by uint64 handles.
//
// Built against jax.ffi.include_dir() only: the few cuDSS and CUDA driver types and entry points
// used here are declared below and resolved with dlsym from libraries opened at run time
// (libcudss from the nvidia-cudss-cu12/cu13 wheel or DIFFSOUP_CUDSS_LIBRARY; libcuda.so.1 from
// the driver, for the handle copies between host and device). A CPU install therefore never
// needs either library, and the same handlers register for the CPU platform too, where they call
// whatever library was loaded with host pointers.
//
// Handles: a numeric factorization is a State (cuDSS data object, matrices, configuration) with
// an id; the arrays JAX carries hold the id, and for a member of a uniform batch its index + 1 in
// the top 16 bits. A symbolic entry (one per pattern and device set) owns the cuDSS handle and a
// small pool of freed, already analysed states that the next factor of the same pattern reuses,
// so the analysis (reordering, symbolic factorization) runs once per pattern, not per factor.
//
// The Python side talks to the registry through the extern "C" functions at the end (ctypes).

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

// ---- the declarations we need from cuda_runtime.h / library_types.h / cudss.h -----------------

extern "C" {
typedef struct CUstream_st* cudaStream_t;
typedef struct cudssContext* cudssHandle_t;
typedef struct cudssMatrix* cudssMatrix_t;
typedef struct cudssData* cudssData_t;
typedef struct cudssConfig* cudssConfig_t;
typedef int cudssStatus_t;
}

namespace {

constexpr int CUDA_R_64F = 1;
constexpr int CUDA_R_32I = 10;
constexpr int CUDSS_MTYPE_GENERAL = 0;
constexpr int CUDSS_MVIEW_FULL = 0;
constexpr int CUDSS_BASE_ZERO = 0;
constexpr int CUDSS_LAYOUT_COL_MAJOR = 0;
constexpr int CUDSS_CONFIG_UBATCH_SIZE = 18;
constexpr int CUDSS_CONFIG_UBATCH_INDEX = 19;
constexpr int CUDSS_DATA_INFO = 0;
constexpr int CUDSS_DATA_COMM_DEVICE = 11;
constexpr int CUDSS_DATA_COMM_HOST = 12;
constexpr int CUDSS_PHASE_ANALYSIS = 3;
constexpr int CUDSS_PHASE_FACTORIZATION = 4;
constexpr int CUDSS_PHASE_REFACTORIZATION = 8;
constexpr int CUDSS_PHASE_SOLVE = 1008;  // FWD_PERM | FWD | DIAG | BWD | BWD_PERM | REFINEMENT

const char* const kStatus[] = {"SUCCESS",        "NOT_INITIALIZED",  "ALLOC_FAILED",
                               "INVALID_VALUE",  "NOT_SUPPORTED",    "EXECUTION_FAILED",
                               "INTERNAL_ERROR", "IR_FAILED"};

struct Api {
#define DIFFSOUP_CUDSS_ENTRY(name, ...) cudssStatus_t (*name)(__VA_ARGS__) = nullptr;
#include "cudss_entries.inc"
#undef DIFFSOUP_CUDSS_ENTRY
};

struct DriverApi {
  int (*cuMemcpyHtoDAsync)(uint64_t, const void*, size_t, cudaStream_t) = nullptr;
  int (*cuMemcpyDtoHAsync)(void*, uint64_t, size_t, cudaStream_t) = nullptr;
  int (*cuStreamSynchronize)(cudaStream_t) = nullptr;
};

std::mutex g_mutex;  // guards everything below
void* g_library = nullptr;
std::string g_library_path;
Api g_api;
void* g_driver = nullptr;
DriverApi g_driver_api;

struct Symbolic;

struct State {
  uint64_t id = 0;
  Symbolic* symbolic = nullptr;
  cudssConfig_t config = nullptr;
  cudssData_t data = nullptr;
  cudssMatrix_t matrix = nullptr;
  int64_t batch = 1;  // uniform batch size
  bool analysed = false;
};

struct Symbolic {
  uint64_t id = 0;
  int64_t n = 0, nnz = 0;
  std::vector<int> devices;  // empty: the calling device; several: multi-GPU mode
  std::string comm_library;  // MGMN: the communication layer
  uint64_t comm = 0;         // MGMN: address of the communicator
  std::map<int, cudssHandle_t> handles;  // by device ordinal (-1 on the CPU platform)
  std::vector<State*> pool;              // freed states, analysed, ready for a new factor
};

std::map<uint64_t, std::unique_ptr<Symbolic>> g_symbolic;
std::map<uint64_t, std::unique_ptr<State>> g_states;
uint64_t g_next_id = 1;
int64_t g_created = 0, g_destroyed = 0;
size_t g_pool_limit = 2;

constexpr int kIndexShift = 48;
constexpr uint64_t kIdMask = (uint64_t{1} << kIndexShift) - 1;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

ffi::Error Check(cudssStatus_t status, const char* what) {
  if (status == 0) return ffi::Error::Success();
  std::string name = (status >= 0 && status < 8) ? kStatus[status] : std::to_string(status);
  return ffi::Error::Internal(std::string("cuDSS ") + what + " failed with CUDSS_STATUS_" + name);
}

#define RETURN_IF_ERROR(expr)             \
  do {                                    \
    ffi::Error err_ = (expr);             \
    if (!err_.success()) return err_;     \
  } while (0)

// ---- memory: the handle arrays live on the device on GPUs, on the host on the CPU -------------

struct Memory {
  cudaStream_t stream = nullptr;  // nullptr: host memory (CPU platform)

  ffi::Error ToHost(void* dst, const void* src, size_t bytes) const {
    if (!stream) {
      std::memcpy(dst, src, bytes);
      return ffi::Error::Success();
    }
    if (g_driver_api.cuMemcpyDtoHAsync(dst, reinterpret_cast<uint64_t>(src), bytes, stream) ||
        g_driver_api.cuStreamSynchronize(stream))
      return ffi::Error::Internal("copying cuDSS handles to the host failed (cuMemcpyDtoHAsync)");
    return ffi::Error::Success();
  }

  ffi::Error ToDevice(void* dst, const void* src, size_t bytes) const {
    if (!stream) {
      std::memcpy(dst, src, bytes);
      return ffi::Error::Success();
    }
    if (g_driver_api.cuMemcpyHtoDAsync(reinterpret_cast<uint64_t>(dst), src, bytes, stream) ||
        g_driver_api.cuStreamSynchronize(stream))
      return ffi::Error::Internal("copying cuDSS handles to the device failed (cuMemcpyHtoDAsync)");
    return ffi::Error::Success();
  }
};

ffi::Error LoadDriver() {
  if (g_driver) return ffi::Error::Success();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return ffi::Error::Internal(std::string("the cuDSS handlers need the CUDA driver "
                                            "(libcuda.so.1), which could not be opened: ") +
                                dlerror());
  g_driver_api.cuMemcpyHtoDAsync = reinterpret_cast<decltype(g_driver_api.cuMemcpyHtoDAsync)>(
      dlsym(lib, "cuMemcpyHtoDAsync_v2"));
  g_driver_api.cuMemcpyDtoHAsync = reinterpret_cast<decltype(g_driver_api.cuMemcpyDtoHAsync)>(
      dlsym(lib, "cuMemcpyDtoHAsync_v2"));
  g_driver_api.cuStreamSynchronize = reinterpret_cast<decltype(g_driver_api.cuStreamSynchronize)>(
      dlsym(lib, "cuStreamSynchronize"));
  if (!g_driver_api.cuMemcpyHtoDAsync || !g_driver_api.cuMemcpyDtoHAsync ||
      !g_driver_api.cuStreamSynchronize)
    return ffi::Error::Internal("libcuda.so.1 lacks cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2 "
                                "or cuStreamSynchronize; update the NVIDIA driver");
  g_driver = lib;
  return ffi::Error::Success();
}

// ---- registry -----------------------------------------------------------------------------

ffi::Error Ready() {
  if (!g_library)
    return ffi::Error::Internal("the cuDSS library is not loaded: call "
                                "solvers.linear.CuDSS().analyse(pattern) first, which loads it");
  return ffi::Error::Success();
}

ffi::Error HandleFor(Symbolic* sym, int device, cudaStream_t stream, cudssHandle_t* out) {
  int key = sym->devices.size() > 1 ? -2 : device;
  auto it = sym->handles.find(key);
  cudssHandle_t handle = nullptr;
  if (it == sym->handles.end()) {
    if (sym->devices.size() > 1)
      RETURN_IF_ERROR(Check(g_api.cudssCreateMg(&handle, static_cast<int>(sym->devices.size()),
                                                sym->devices.data()),
                            "cudssCreateMg"));
    else
      RETURN_IF_ERROR(Check(g_api.cudssCreate(&handle), "cudssCreate"));
    if (!sym->comm_library.empty())
      RETURN_IF_ERROR(Check(g_api.cudssSetCommLayer(handle, sym->comm_library.c_str()),
                            "cudssSetCommLayer"));
    sym->handles[key] = handle;
  } else {
    handle = it->second;
  }
  RETURN_IF_ERROR(Check(g_api.cudssSetStream(handle, stream), "cudssSetStream"));
  *out = handle;
  return ffi::Error::Success();
}

void DestroyState(State* s, cudssHandle_t handle) {
  if (s->matrix) g_api.cudssMatrixDestroy(s->matrix);
  if (s->data && handle) g_api.cudssDataDestroy(handle, s->data);
  if (s->config) g_api.cudssConfigDestroy(s->config);
  ++g_destroyed;
}

// A state for `batch` matrices of `sym`: an analysed one from the pool, else a new one.
ffi::Error Acquire(Symbolic* sym, cudssHandle_t handle, int64_t batch, State** out) {
  for (auto it = sym->pool.begin(); it != sym->pool.end(); ++it) {
    if ((*it)->batch == batch) {
      *out = *it;
      sym->pool.erase(it);
      return ffi::Error::Success();
    }
  }
  auto s = std::make_unique<State>();
  s->id = g_next_id++;
  s->symbolic = sym;
  s->batch = batch;
  RETURN_IF_ERROR(Check(g_api.cudssConfigCreate(&s->config), "cudssConfigCreate"));
  RETURN_IF_ERROR(Check(g_api.cudssDataCreate(handle, &s->data), "cudssDataCreate"));
  if (batch > 1) {
    int size = static_cast<int>(batch);
    RETURN_IF_ERROR(Check(g_api.cudssConfigSet(s->config, CUDSS_CONFIG_UBATCH_SIZE, &size,
                                               sizeof size),
                          "cudssConfigSet(UBATCH_SIZE)"));
  }
  if (sym->comm) {
    void* comm = reinterpret_cast<void*>(sym->comm);
    RETURN_IF_ERROR(Check(g_api.cudssDataSet(handle, s->data, CUDSS_DATA_COMM_DEVICE, &comm,
                                             sizeof comm),
                          "cudssDataSet(COMM_DEVICE)"));
    RETURN_IF_ERROR(Check(g_api.cudssDataSet(handle, s->data, CUDSS_DATA_COMM_HOST, &comm,
                                             sizeof comm),
                          "cudssDataSet(COMM_HOST)"));
  }
  ++g_created;
  *out = s.get();
  g_states[s->id] = std::move(s);
  return ffi::Error::Success();
}

// ---- checks of the operands ----------------------------------------------------------------

// The CSR arrays may carry leading batch axes (vmap broadcasts every operand): the first row is
// used, all rows being copies of the same constant.
ffi::Error CheckPattern(const Symbolic* sym, ffi::Buffer<ffi::S32> rowptr,
                        ffi::Buffer<ffi::S32> colind) {
  auto rd = rowptr.dimensions(), cd = colind.dimensions();
  if (rd.size() < 1 || cd.size() < 1 || rd.back() != sym->n + 1 || cd.back() != sym->nnz)
    return ffi::Error::InvalidArgument(
        "the CSR arrays do not match the analysed pattern: row offsets of length " +
        (rd.size() ? std::to_string(rd.back()) : std::string("none")) + " (expected n + 1 = " +
        std::to_string(sym->n + 1) + "), column indices of length " +
        (cd.size() ? std::to_string(cd.back()) : std::string("none")) + " (expected nnz = " +
        std::to_string(sym->nnz) + "); analyse the pattern these values belong to");
  return ffi::Error::Success();
}

ffi::Error Rows(ffi::Span<const int64_t> dims, int64_t width, const char* what, int64_t* rows) {
  if (dims.size() < 1 || dims.back() != width)
    return ffi::Error::InvalidArgument(std::string(what) + " must end in an axis of length " +
                                       std::to_string(width) + ", got one of length " +
                                       (dims.size() ? std::to_string(dims.back()) : "none"));
  int64_t r = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) r *= dims[i];
  *rows = r;
  return ffi::Error::Success();
}

ffi::Error FindSymbolic(uint64_t id, Symbolic** out) {
  auto it = g_symbolic.find(id);
  if (it == g_symbolic.end())
    return ffi::Error::InvalidArgument("unknown cuDSS analysis " + Hex(id) +
                                       ": it was released (analyse the pattern again)");
  *out = it->second.get();
  return ffi::Error::Success();
}

ffi::Error FindState(uint64_t handle, State** out) {
  auto it = g_states.find(handle & kIdMask);
  if (it == g_states.end())
    return ffi::Error::InvalidArgument(
        "unknown cuDSS factorization handle " + Hex(handle) +
        ": it was freed already (a factorization is freed once, by release or a FACTOR update) "
        "or never made by factor");
  *out = it->second.get();
  return ffi::Error::Success();
}

// The members `handles[0..k)` as one state: the k members of one uniform batch in order
// (`*whole` set), or k copies of one unbatched state (k right-hand sides).
ffi::Error Group(const std::vector<uint64_t>& handles, State** out, bool* whole) {
  State* s = nullptr;
  RETURN_IF_ERROR(FindState(handles[0], &s));
  const size_t k = handles.size();
  if (s->batch > 1) {
    bool ok = static_cast<int64_t>(k) == s->batch;
    for (size_t i = 0; ok && i < k; ++i)
      ok = handles[i] == (s->id | (static_cast<uint64_t>(i + 1) << kIndexShift));
    if (!ok)
      return ffi::Error::InvalidArgument(
          "the handles " + Hex(handles[0]) + ", ... name members of a uniform batch of " +
          std::to_string(s->batch) + " factorizations out of order or in part; a batch made "
          "under vmap is refactored and solved under the same vmap (or factor the members one "
          "at a time with lax.map to use them separately)");
    *whole = true;
  } else {
    for (size_t i = 1; i < k; ++i)
      if (handles[i] != handles[0])
        return ffi::Error::InvalidArgument(
            "handles " + Hex(handles[0]) + " and " + Hex(handles[i]) + " in one call: solve "
            "several factorizations under vmap only when they were factored under the same vmap");
    *whole = false;
  }
  *out = s;
  return ffi::Error::Success();
}

ffi::Error ReadHandles(const Memory& mem, ffi::Buffer<ffi::U64> buf, int64_t count,
                       std::vector<uint64_t>* out) {
  out->resize(count);
  return mem.ToHost(out->data(), buf.typed_data(), count * sizeof(uint64_t));
}

ffi::Error Factorize(State* s, cudssHandle_t handle, int phase, ffi::Buffer<ffi::S32> rowptr,
                     ffi::Buffer<ffi::S32> colind, double* values) {
  const Symbolic* sym = s->symbolic;
  if (!s->matrix)
    RETURN_IF_ERROR(Check(g_api.cudssMatrixCreateCsr(
                              &s->matrix, sym->n, sym->n, sym->nnz, rowptr.typed_data(), nullptr,
                              colind.typed_data(), values, CUDA_R_32I, CUDA_R_32I, CUDA_R_64F,
                              CUDSS_MTYPE_GENERAL, CUDSS_MVIEW_FULL, CUDSS_BASE_ZERO),
                          "cudssMatrixCreateCsr"));
  else
    RETURN_IF_ERROR(Check(g_api.cudssMatrixSetCsrPointers(s->matrix, rowptr.typed_data(),
                                                          nullptr, colind.typed_data(), values),
                          "cudssMatrixSetCsrPointers"));
  // The dense operands are not read by these phases; they point at the values (nnz >= n).
  cudssMatrix_t dense = nullptr;
  RETURN_IF_ERROR(Check(g_api.cudssMatrixCreateDn(&dense, sym->n, 1, sym->n, values, CUDA_R_64F,
                                                  CUDSS_LAYOUT_COL_MAJOR),
                        "cudssMatrixCreateDn"));
  ffi::Error err = ffi::Error::Success();
  if (!s->analysed) {
    err = Check(g_api.cudssExecute(handle, CUDSS_PHASE_ANALYSIS, s->config, s->data, s->matrix,
                                   dense, dense),
                "analysis (cudssExecute)");
    if (err.success()) s->analysed = true;
  }
  if (err.success())
    err = Check(g_api.cudssExecute(handle, phase, s->config, s->data, s->matrix, dense, dense),
                phase == CUDSS_PHASE_FACTORIZATION ? "factorization (cudssExecute)"
                                                   : "refactorization (cudssExecute)");
  g_api.cudssMatrixDestroy(dense);
  if (!err.success()) return err;
  int info = 0;
  size_t written = 0;
  RETURN_IF_ERROR(Check(g_api.cudssDataGet(handle, s->data, CUDSS_DATA_INFO, &info, sizeof info,
                                           &written),
                        "cudssDataGet(INFO)"));
  if (info != 0)
    return ffi::Error::Internal("cuDSS reports the matrix singular or the factorization failed "
                                "(CUDSS_DATA_INFO = " + std::to_string(info) + ")");
  return ffi::Error::Success();
}

ffi::Error WriteHandles(const Memory& mem, const State* s, int64_t k,
                        ffi::Result<ffi::Buffer<ffi::U64>> out) {
  std::vector<uint64_t> handles(k, s->id);
  if (s->batch > 1)
    for (int64_t i = 0; i < k; ++i) handles[i] |= static_cast<uint64_t>(i + 1) << kIndexShift;
  return mem.ToDevice(out->typed_data(), handles.data(), k * sizeof(uint64_t));
}

// ---- the handlers --------------------------------------------------------------------------

ffi::Error FactorImpl(const Memory& mem, int device, ffi::Buffer<ffi::S32> rowptr,
                      ffi::Buffer<ffi::S32> colind, ffi::Buffer<ffi::F64> values, uint64_t sym_id,
                      ffi::Result<ffi::Buffer<ffi::U64>> out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  RETURN_IF_ERROR(Ready());
  Symbolic* sym = nullptr;
  RETURN_IF_ERROR(FindSymbolic(sym_id, &sym));
  RETURN_IF_ERROR(CheckPattern(sym, rowptr, colind));
  int64_t k = 0;
  RETURN_IF_ERROR(Rows(values.dimensions(), sym->nnz, "the values", &k));
  if (static_cast<int64_t>(out->element_count()) != k)
    return ffi::Error::InvalidArgument("the handle output holds " +
                                       std::to_string(out->element_count()) + " entries for " +
                                       std::to_string(k) + " matrices");
  cudssHandle_t handle = nullptr;
  RETURN_IF_ERROR(HandleFor(sym, device, mem.stream, &handle));
  State* s = nullptr;
  RETURN_IF_ERROR(Acquire(sym, handle, k, &s));
  ffi::Error err = Factorize(s, handle, CUDSS_PHASE_FACTORIZATION, rowptr, colind,
                             values.typed_data());
  if (!err.success()) {
    sym->pool.push_back(s);  // still a valid (analysed or fresh) state
    return err;
  }
  return WriteHandles(mem, s, k, out);
}

ffi::Error RefactorImpl(const Memory& mem, int device, ffi::Buffer<ffi::S32> rowptr,
                        ffi::Buffer<ffi::S32> colind, ffi::Buffer<ffi::F64> values,
                        ffi::Buffer<ffi::U64> numeric, uint64_t sym_id,
                        ffi::Result<ffi::Buffer<ffi::U64>> out) {
  int64_t k = 0;
  std::vector<uint64_t> handles;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    RETURN_IF_ERROR(Ready());
    Symbolic* sym = nullptr;
    RETURN_IF_ERROR(FindSymbolic(sym_id, &sym));
    RETURN_IF_ERROR(CheckPattern(sym, rowptr, colind));
    RETURN_IF_ERROR(Rows(values.dimensions(), sym->nnz, "the values", &k));
    if (static_cast<int64_t>(numeric.element_count()) != k)
      return ffi::Error::InvalidArgument(std::to_string(numeric.element_count()) +
                                         " handles for " + std::to_string(k) + " matrices");
    RETURN_IF_ERROR(ReadHandles(mem, numeric, k, &handles));
  }
  if (handles[0] == 0)  // the empty state: nothing to reuse, factor afresh
    return FactorImpl(mem, device, rowptr, colind, values, sym_id, out);
  std::lock_guard<std::mutex> lock(g_mutex);
  State* s = nullptr;
  bool whole = false;
  RETURN_IF_ERROR(Group(handles, &s, &whole));
  if (s->symbolic->id != sym_id)
    return ffi::Error::InvalidArgument("handle " + Hex(handles[0]) + " belongs to analysis " +
                                       Hex(s->symbolic->id) + ", not to " + Hex(sym_id) +
                                       ": the pattern changed; factor the new pattern instead");
  if (!whole && k > 1)
    return ffi::Error::InvalidArgument("one factorization refactored with " + std::to_string(k) +
                                       " value sets; factor the batch under vmap instead");
  cudssHandle_t handle = nullptr;
  RETURN_IF_ERROR(HandleFor(s->symbolic, device, mem.stream, &handle));
  RETURN_IF_ERROR(Factorize(s, handle, CUDSS_PHASE_REFACTORIZATION, rowptr, colind,
                            values.typed_data()));
  return WriteHandles(mem, s, k, out);
}

ffi::Error SolveImpl(const Memory& mem, int device, ffi::Buffer<ffi::U64> numeric,
                     ffi::Buffer<ffi::F64> b, ffi::Result<ffi::Buffer<ffi::F64>> x) {
  std::vector<uint64_t> handles;
  std::lock_guard<std::mutex> lock(g_mutex);
  RETURN_IF_ERROR(Ready());
  int64_t k = static_cast<int64_t>(numeric.element_count());
  if (k < 1) return ffi::Error::InvalidArgument("solve needs a factorization handle");
  RETURN_IF_ERROR(ReadHandles(mem, numeric, k, &handles));
  State* s = nullptr;
  bool whole = false;
  RETURN_IF_ERROR(Group(handles, &s, &whole));
  const Symbolic* sym = s->symbolic;
  int64_t rows = 0;
  RETURN_IF_ERROR(Rows(b.dimensions(), sym->n, "the right-hand side", &rows));
  if (rows != k)
    return ffi::Error::InvalidArgument("the right-hand side holds " + std::to_string(rows) +
                                       " vectors for " + std::to_string(k) + " handles");
  cudssHandle_t handle = nullptr;
  RETURN_IF_ERROR(HandleFor(s->symbolic, device, mem.stream, &handle));
  // A uniform batch: one vector per member; one factorization: k right-hand sides.
  int64_t ncols = whole ? 1 : k;
  cudssMatrix_t rhs = nullptr, sol = nullptr;
  RETURN_IF_ERROR(Check(g_api.cudssMatrixCreateDn(&rhs, sym->n, ncols, sym->n, b.typed_data(),
                                                  CUDA_R_64F, CUDSS_LAYOUT_COL_MAJOR),
                        "cudssMatrixCreateDn"));
  ffi::Error err = Check(g_api.cudssMatrixCreateDn(&sol, sym->n, ncols, sym->n, x->typed_data(),
                                                   CUDA_R_64F, CUDSS_LAYOUT_COL_MAJOR),
                         "cudssMatrixCreateDn");
  if (err.success())
    err = Check(g_api.cudssExecute(handle, CUDSS_PHASE_SOLVE, s->config, s->data, s->matrix, sol,
                                   rhs),
                "solve (cudssExecute)");
  if (sol) g_api.cudssMatrixDestroy(sol);
  g_api.cudssMatrixDestroy(rhs);
  return err;
}

ffi::Error FreeImpl(const Memory& mem, ffi::Buffer<ffi::U64> numeric,
                    ffi::Result<ffi::Buffer<ffi::S32>>) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<uint64_t> handles;
  RETURN_IF_ERROR(ReadHandles(mem, numeric, static_cast<int64_t>(numeric.element_count()),
                              &handles));
  std::vector<uint64_t> ids;
  for (uint64_t h : handles) {
    if (h == 0) continue;  // the empty state
    uint64_t id = h & kIdMask;
    bool seen = false;
    for (uint64_t i : ids) seen = seen || i == id;
    if (seen) continue;  // members of one batch, or one state broadcast: freed once
    State* s = nullptr;
    RETURN_IF_ERROR(FindState(h, &s));
    ids.push_back(id);
  }
  for (uint64_t id : ids) {
    auto it = g_states.find(id);
    State* s = it->second.get();
    Symbolic* sym = s->symbolic;
    if (s->analysed && sym->pool.size() < g_pool_limit) {
      // Kept for the next factor of this pattern; a new id so the old handle is dead.
      auto owned = std::move(it->second);
      g_states.erase(it);
      owned->id = g_next_id++;
      sym->pool.push_back(owned.get());
      g_states[owned->id] = std::move(owned);
      continue;
    }
    auto h = sym->handles.begin();
    DestroyState(s, h == sym->handles.end() ? nullptr : h->second);
    g_states.erase(it);
  }
  return ffi::Error::Success();
}

// Platform wrappers: the CUDA ones take XLA's stream and device, the CPU ones neither.

ffi::Error FactorCuda(cudaStream_t stream, int32_t device, ffi::Buffer<ffi::S32> rowptr,
                      ffi::Buffer<ffi::S32> colind, ffi::Buffer<ffi::F64> values, uint64_t sym,
                      ffi::Result<ffi::Buffer<ffi::U64>> out) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    RETURN_IF_ERROR(LoadDriver());
  }
  return FactorImpl(Memory{stream}, device, rowptr, colind, values, sym, out);
}
ffi::Error FactorCpu(ffi::Buffer<ffi::S32> rowptr, ffi::Buffer<ffi::S32> colind,
                     ffi::Buffer<ffi::F64> values, uint64_t sym,
                     ffi::Result<ffi::Buffer<ffi::U64>> out) {
  return FactorImpl(Memory{}, -1, rowptr, colind, values, sym, out);
}
ffi::Error RefactorCuda(cudaStream_t stream, int32_t device, ffi::Buffer<ffi::S32> rowptr,
                        ffi::Buffer<ffi::S32> colind, ffi::Buffer<ffi::F64> values,
                        ffi::Buffer<ffi::U64> numeric, uint64_t sym,
                        ffi::Result<ffi::Buffer<ffi::U64>> out) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    RETURN_IF_ERROR(LoadDriver());
  }
  return RefactorImpl(Memory{stream}, device, rowptr, colind, values, numeric, sym, out);
}
ffi::Error RefactorCpu(ffi::Buffer<ffi::S32> rowptr, ffi::Buffer<ffi::S32> colind,
                       ffi::Buffer<ffi::F64> values, ffi::Buffer<ffi::U64> numeric, uint64_t sym,
                       ffi::Result<ffi::Buffer<ffi::U64>> out) {
  return RefactorImpl(Memory{}, -1, rowptr, colind, values, numeric, sym, out);
}
ffi::Error SolveCuda(cudaStream_t stream, int32_t device, ffi::Buffer<ffi::U64> numeric,
                     ffi::Buffer<ffi::F64> b, ffi::Result<ffi::Buffer<ffi::F64>> x) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    RETURN_IF_ERROR(LoadDriver());
  }
  return SolveImpl(Memory{stream}, device, numeric, b, x);
}
ffi::Error SolveCpu(ffi::Buffer<ffi::U64> numeric, ffi::Buffer<ffi::F64> b,
                    ffi::Result<ffi::Buffer<ffi::F64>> x) {
  return SolveImpl(Memory{}, -1, numeric, b, x);
}
ffi::Error FreeCuda(cudaStream_t stream, ffi::Buffer<ffi::U64> numeric,
                    ffi::Result<ffi::Buffer<ffi::S32>> done) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    RETURN_IF_ERROR(LoadDriver());
  }
  return FreeImpl(Memory{stream}, numeric, done);
}
ffi::Error FreeCpu(ffi::Buffer<ffi::U64> numeric, ffi::Result<ffi::Buffer<ffi::S32>> done) {
  return FreeImpl(Memory{}, numeric, done);
}

}  // namespace

#define DIFFSOUP_EXPORT extern "C" __attribute__((visibility("default")))

XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_factor_cuda, FactorCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Attr<uint64_t>("symbolic")
                                  .Ret<ffi::Buffer<ffi::U64>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_factor_cpu, FactorCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Attr<uint64_t>("symbolic")
                                  .Ret<ffi::Buffer<ffi::U64>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_refactor_cuda, RefactorCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::U64>>()
                                  .Attr<uint64_t>("symbolic")
                                  .Ret<ffi::Buffer<ffi::U64>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_refactor_cpu, RefactorCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Arg<ffi::Buffer<ffi::U64>>()
                                  .Attr<uint64_t>("symbolic")
                                  .Ret<ffi::Buffer<ffi::U64>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_solve_cuda, SolveCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Arg<ffi::Buffer<ffi::U64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_solve_cpu, SolveCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U64>>()
                                  .Arg<ffi::Buffer<ffi::F64>>()
                                  .Ret<ffi::Buffer<ffi::F64>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_free_cuda, FreeCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::U64>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(diffsoup_cudss_free_cpu, FreeCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::U64>>()
                                  .Ret<ffi::Buffer<ffi::S32>>());

// ---- host-side functions for ctypes --------------------------------------------------------

// Open the cuDSS library at `path` and resolve every entry point. Returns 0, or 1 with a message
// in `error` (the library could not be opened, or lacks a symbol, named).
DIFFSOUP_EXPORT int diffsoup_cudss_load(const char* path, char* error, size_t error_size) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_library) {
    if (g_library_path == path) return 0;
    std::snprintf(error, error_size, "a cuDSS library is loaded already from %s; one process "
                  "uses one library (unset DIFFSOUP_CUDSS_LIBRARY or restart)",
                  g_library_path.c_str());
    return 1;
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::snprintf(error, error_size, "%s", dlerror());
    return 1;
  }
  Api api;
  const char* missing = nullptr;
#define DIFFSOUP_CUDSS_ENTRY(name, ...)                                         \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name)); \
  if (!api.name && !missing) missing = #name;
#include "cudss_entries.inc"
#undef DIFFSOUP_CUDSS_ENTRY
  if (missing) {
    std::snprintf(error, error_size, "%s has no symbol %s; it is not a cuDSS 1.x library "
                  "(install nvidia-cudss-cu12 or nvidia-cudss-cu13 >= 1.0)", path, missing);
    dlclose(lib);
    return 1;
  }
  g_api = api;
  g_library = lib;
  g_library_path = path;
  return 0;
}

// A new analysis entry for an n x n pattern with nnz entries, for `device_count` devices
// (`devices`: CUDA ordinals; 0 or 1: the calling device), optionally with a communication layer
// library and communicator address (multi-node mode). Returns its id.
DIFFSOUP_EXPORT uint64_t diffsoup_cudss_symbolic_new(int64_t n, int64_t nnz, int device_count,
                                                     const int* devices, const char* comm_library,
                                                     uint64_t comm) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto sym = std::make_unique<Symbolic>();
  sym->id = g_next_id++;
  sym->n = n;
  sym->nnz = nnz;
  if (device_count > 1) sym->devices.assign(devices, devices + device_count);
  if (comm_library) sym->comm_library = comm_library;
  sym->comm = comm;
  uint64_t id = sym->id;
  g_symbolic[id] = std::move(sym);
  return id;
}

// Release an analysis: its pooled states and cuDSS handles. Live factorizations of it stay
// valid until freed. Returns 0, or 1 for an unknown id.
DIFFSOUP_EXPORT int diffsoup_cudss_symbolic_free(uint64_t id) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_symbolic.find(id);
  if (it == g_symbolic.end()) return 1;
  Symbolic* sym = it->second.get();
  bool live = false;
  for (auto& kv : g_states) {
    bool pooled = false;
    for (State* p : sym->pool) pooled = pooled || p == kv.second.get();
    live = live || (kv.second->symbolic == sym && !pooled);
  }
  cudssHandle_t handle = sym->handles.empty() ? nullptr : sym->handles.begin()->second;
  for (State* p : sym->pool) {
    DestroyState(p, handle);
    g_states.erase(p->id);
  }
  sym->pool.clear();
  if (live) return 0;  // the handles are destroyed with the last state's analysis entry
  for (auto& kv : sym->handles) g_api.cudssDestroy(kv.second);
  g_symbolic.erase(it);
  return 0;
}

// Counts for tests and diagnostics: live factorizations, pooled ones, analyses, created and
// destroyed states since start.
DIFFSOUP_EXPORT void diffsoup_cudss_counts(int64_t* out) {
  std::lock_guard<std::mutex> lock(g_mutex);
  int64_t pooled = 0;
  for (auto& kv : g_symbolic) pooled += static_cast<int64_t>(kv.second->pool.size());
  out[0] = static_cast<int64_t>(g_states.size()) - pooled;
  out[1] = pooled;
  out[2] = static_cast<int64_t>(g_symbolic.size());
  out[3] = g_created;
  out[4] = g_destroyed;
}

// How many freed factorizations each analysis keeps for reuse (default 2).
DIFFSOUP_EXPORT void diffsoup_cudss_set_pool_limit(int64_t limit) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pool_limit = limit < 0 ? 0 : static_cast<size_t>(limit);
}

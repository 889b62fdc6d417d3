/* A stand-in for libcudss with the entry points the cuDSS handlers call, computing on the host:
 * dense LU with partial pivoting of each (uniform-batch) matrix. It lets the whole FFI path
 * (load, registry, handlers, JAX calls) run on a machine without a GPU. Built by the tests with
 * gcc; -DFAKE_OMIT_EXECUTE leaves out cudssExecute (a library missing a symbol). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 3 };
enum { ANALYSIS = 3, FACTORIZATION = 4, REFACTORIZATION = 8, SOLVE = 1008 };
enum { UBATCH_SIZE = 18, UBATCH_INDEX = 19, DATA_INFO = 0 };

typedef struct { int devices; } Handle;
typedef struct { int ubatch_size; int ubatch_index; } Config;
typedef struct { int64_t n; int batch; double *lu; int *piv; int info; int analysed; int factored; } Data;
typedef struct {
  int csr; int64_t nrows, ncols, nnz, ld;
  const int *rowptr, *colind; void *values;
} Matrix;

static long analyses = 0, factorizations = 0, solves = 0;
long fake_cudss_analyses(void) { return analyses; }
long fake_cudss_factorizations(void) { return factorizations; }
long fake_cudss_solves(void) { return solves; }

int cudssCreate(Handle **h) { *h = calloc(1, sizeof(Handle)); (*h)->devices = 1; return OK; }
int cudssCreateMg(Handle **h, int count, const int *idx) {
  (void)idx; *h = calloc(1, sizeof(Handle)); (*h)->devices = count; return OK;
}
int cudssDestroy(Handle *h) { free(h); return OK; }
int cudssSetStream(Handle *h, void *s) { (void)h; (void)s; return OK; }
int cudssSetCommLayer(Handle *h, const char *lib) { (void)h; (void)lib; return OK; }
int cudssConfigCreate(Config **c) { *c = calloc(1, sizeof(Config)); (*c)->ubatch_index = -1; return OK; }
int cudssConfigDestroy(Config *c) { free(c); return OK; }
int cudssConfigSet(Config *c, int param, const void *v, size_t size) {
  if (size != sizeof(int)) return INVALID_VALUE;
  if (param == UBATCH_SIZE) c->ubatch_size = *(const int *)v;
  else if (param == UBATCH_INDEX) c->ubatch_index = *(const int *)v;
  return OK;
}
int cudssDataCreate(Handle *h, Data **d) { (void)h; *d = calloc(1, sizeof(Data)); return OK; }
int cudssDataDestroy(Handle *h, Data *d) { (void)h; free(d->lu); free(d->piv); free(d); return OK; }
int cudssDataSet(Handle *h, Data *d, int p, const void *v, size_t s) {
  (void)h; (void)d; (void)p; (void)v; (void)s; return OK;
}
int cudssDataGet(Handle *h, Data *d, int p, void *v, size_t size, size_t *written) {
  (void)h;
  if (p != DATA_INFO || size < sizeof(int)) return INVALID_VALUE;
  *(int *)v = d->info; *written = sizeof(int); return OK;
}
int cudssMatrixCreateCsr(Matrix **m, int64_t nr, int64_t nc, int64_t nnz, const void *rs,
                         const void *re, const void *ci, const void *vals, int ot, int it, int vt,
                         int mt, int mv, int base) {
  (void)re; (void)ot; (void)it; (void)vt; (void)mt; (void)mv; (void)base;
  *m = calloc(1, sizeof(Matrix));
  (*m)->csr = 1; (*m)->nrows = nr; (*m)->ncols = nc; (*m)->nnz = nnz;
  (*m)->rowptr = rs; (*m)->colind = ci; (*m)->values = (void *)vals; return OK;
}
int cudssMatrixCreateDn(Matrix **m, int64_t nr, int64_t nc, int64_t ld, const void *vals, int vt,
                        int layout) {
  (void)vt; (void)layout;
  *m = calloc(1, sizeof(Matrix));
  (*m)->nrows = nr; (*m)->ncols = nc; (*m)->ld = ld; (*m)->values = (void *)vals; return OK;
}
int cudssMatrixSetCsrPointers(Matrix *m, const void *rs, const void *re, const void *ci,
                              const void *vals) {
  (void)re; m->rowptr = rs; m->colind = ci; m->values = (void *)vals; return OK;
}
int cudssMatrixDestroy(Matrix *m) { free(m); return OK; }

static int factor_one(int64_t n, const Matrix *a, const double *vals, double *lu, int *piv) {
  memset(lu, 0, sizeof(double) * n * n);
  for (int64_t i = 0; i < n; ++i)
    for (int k = a->rowptr[i]; k < a->rowptr[i + 1]; ++k) lu[i * n + a->colind[k]] = vals[k];
  for (int64_t k = 0; k < n; ++k) {
    int64_t p = k;
    for (int64_t i = k + 1; i < n; ++i) if (fabs(lu[i * n + k]) > fabs(lu[p * n + k])) p = i;
    if (lu[p * n + k] == 0.0) return 1;
    piv[k] = (int)p;
    if (p != k) for (int64_t j = 0; j < n; ++j) {
      double t = lu[k * n + j]; lu[k * n + j] = lu[p * n + j]; lu[p * n + j] = t;
    }
    for (int64_t i = k + 1; i < n; ++i) {
      double f = lu[i * n + k] /= lu[k * n + k];
      for (int64_t j = k + 1; j < n; ++j) lu[i * n + j] -= f * lu[k * n + j];
    }
  }
  return 0;
}

static void solve_one(int64_t n, const double *lu, const int *piv, const double *b, double *x) {
  double *y = malloc(sizeof(double) * n);
  memcpy(y, b, sizeof(double) * n);
  for (int64_t k = 0; k < n; ++k) { double t = y[k]; y[k] = y[piv[k]]; y[piv[k]] = t; }
  for (int64_t i = 0; i < n; ++i) for (int64_t j = 0; j < i; ++j) y[i] -= lu[i * n + j] * y[j];
  for (int64_t i = n - 1; i >= 0; --i) {
    for (int64_t j = i + 1; j < n; ++j) y[i] -= lu[i * n + j] * y[j];
    y[i] /= lu[i * n + i];
  }
  memcpy(x, y, sizeof(double) * n);
  free(y);
}

#ifndef FAKE_OMIT_EXECUTE
int cudssExecute(Handle *h, int phase, Config *c, Data *d, Matrix *a, Matrix *x, Matrix *b) {
  (void)h;
  int batch = c->ubatch_size > 1 ? c->ubatch_size : 1;
  if (phase == ANALYSIS) {
    if (!a || !a->csr || a->nrows != a->ncols) return INVALID_VALUE;
    d->n = a->nrows; d->batch = batch; d->analysed = 1; ++analyses;
    free(d->lu); free(d->piv);
    d->lu = malloc(sizeof(double) * batch * d->n * d->n);
    d->piv = malloc(sizeof(int) * batch * d->n);
    return OK;
  }
  if (!d->analysed) return NOT_INITIALIZED;
  int64_t n = d->n;
  if (phase == FACTORIZATION || phase == REFACTORIZATION) {
    d->info = 0;
    for (int m = 0; m < batch; ++m)
      if (factor_one(n, a, (const double *)a->values + m * a->nnz, d->lu + m * n * n,
                     d->piv + m * n)) d->info = 1;
    d->factored = !d->info; ++factorizations;
    return OK;
  }
  if (phase == SOLVE) {
    if (!d->factored) return NOT_INITIALIZED;
    ++solves;
    if (batch > 1) {
      for (int m = 0; m < batch; ++m)
        solve_one(n, d->lu + m * n * n, d->piv + m * n, (const double *)b->values + m * n,
                  (double *)x->values + m * n);
    } else {
      for (int64_t j = 0; j < b->ncols; ++j)
        solve_one(n, d->lu, d->piv, (const double *)b->values + j * b->ld,
                  (double *)x->values + j * x->ld);
    }
    return OK;
  }
  return INVALID_VALUE;
}
#endif

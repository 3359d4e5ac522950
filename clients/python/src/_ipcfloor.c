/* ipcfloor._ipcfloor: the ipcfloor package's binding of the C ABI (include/ipcfloor/ipcfloor.h),
 * on the CPython C API with METH_FASTCALL. Chosen over Cython and pybind11 by measured cost per
 * call (docs/RESULTS.md, "Python over the segment").
 *
 * Client is one claimed lane. The Python class ipcfloor.Engine derives from it and adds what is
 * not per call (views, names, sweeps' arrays, messages for bad input).
 *
 * Fast path and slow path. The per-call methods take the canonical forms at once: six exact
 * Python ints within int64 in a tuple or a list, an exact int series index below 2**32, a float
 * close and an int tick. Any other form, valid or not, goes to the Engine's Python method
 * _<method>_slow with the same arguments; it names what is wrong, or turns the value into the
 * canonical form and calls back. So a value is judged in one place, and the hot path converts
 * nothing twice.
 *
 * Threads. Every call that can wait on the engine (attach, backtest, sweep, echo, append,
 * subscribe, snapshot, wait_signal) hands the GIL over while it waits, whenever another thread
 * could take it (begin_wait). A lane serves one thread at a time (ipcfloor.h): a Client refuses
 * a second thread while a call is in flight, and the call in flight keeps the C client alive even
 * if another thread closes the Engine meanwhile.
 *
 * Signals. A call that waits (or sweeps) runs Python's signal handlers every kSignalCheckNs
 * through the library's interrupt check (ipcfloor_set_interrupt, check_signals): Ctrl-C raises
 * KeyboardInterrupt within that, instead of when the call would have ended, and the call stops
 * with IPCFLOOR_E_INTERRUPTED, which leaves the lane usable (its next call drops what this one
 * left owed). attach's own wait (a lane being freed) is bounded by its timeout only.
 *
 * Fork. The library refuses every call on a client inherited through fork() with
 * IPCFLOOR_E_FORKED (ipcfloor.Forked), and detaching it in the child leaves the parent's lane
 * alone.
 *
 * Errors: the classes ipcfloor registers with _configure (ipcfloor.Error and one subclass per
 * code), built as cls(code, sentence) with the C ABI's code and sentence. Allocation: a call
 * allocates its result objects only; the C calls allocate nothing (ipcfloor.h). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#include <ipcfloor/ipcfloor.h>

/* The failure codes run from -1 to -kCodes (some unused); error_classes[-code] is the class of
 * each (NULL: the base class). */
enum { kCodes = 42 };
/* How often a waiting call runs Python's signal handlers: Ctrl-C is seen within about this. */
static const int64_t kSignalCheckNs = 20 * 1000 * 1000;
static PyObject *error_classes[kCodes + 1];
static PyObject *base_error;   /* ipcfloor.Error */
static PyObject *closed_error; /* ipcfloor.Closed: a call on a closed Engine */
static PyTypeObject *signal_type;

/* The slow paths' names, interned once. */
static PyObject *s_backtest_slow, *s_echo_slow, *s_subscribe_slow, *s_append_slow, *s_backtest_options;
static PyObject *s_zero; /* the int 0: backtest's default series */

/* ---- Errors ---------------------------------------------------------------------------- */

static PyObject *error_class(int code) {
  if (code < 0 && -code <= kCodes && error_classes[-code] != NULL) return error_classes[-code];
  return base_error != NULL ? base_error : PyExc_RuntimeError;
}

/* Raises cls(code, message) and returns NULL. The message may be any bytes: the
 * engine's name comes from the user. */
static PyObject *raise_error(PyObject *cls, int code, const char *message) {
  PyObject *text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  if (text == NULL) return NULL;
  PyObject *error = cls == PyExc_RuntimeError ? PyObject_CallFunction(cls, "O", text)
                                              : PyObject_CallFunction(cls, "iO", code, text);
  Py_DECREF(text);
  if (error == NULL) return NULL;
  PyErr_SetObject((PyObject *)Py_TYPE(error), error);
  Py_DECREF(error);
  return NULL;
}

/* The failure of a call on client c: its sentence, or the code's fixed name when it left none. */
static PyObject *raise_code(const ipcfloor_client *c, int code) {
  const char *message = ipcfloor_last_error(c);
  return raise_error(error_class(code), code, message[0] != '\0' ? message : ipcfloor_strerror(code));
}

/* ---- Handle: owns the C client; the Client and every series view hold it ----------------- */

/* The GIL of the call waiting on a client: the state it handed over (begin_wait), NULL while
 * the call holds it. check_signals reads and updates it from inside the call. */
typedef struct {
  PyThreadState *saved;
} Waiting;

typedef struct {
  PyObject_HEAD
  ipcfloor_client *c;
  Waiting waiting; /* the interrupt check's context */
} Handle;

static void Handle_dealloc(Handle *self) {
  ipcfloor_detach(self->c); /* hands the lane back and unmaps: no view is left */
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ipcfloor._ipcfloor.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Owns one attached C client; detaches when the last holder goes.",
};

/* ---- SeriesBuffer: a read-only buffer over n doubles of the mapping ---------------------- */

typedef struct {
  PyObject_HEAD
  PyObject *handle; /* keeps the mapping alive */
  const double *data;
  Py_ssize_t n;
} SeriesBuffer;

static const double kEmpty[1] = {0.0};
static Py_ssize_t kDoubleSize = sizeof(double);

static int SeriesBuffer_getbuffer(SeriesBuffer *self, Py_buffer *view, int flags) {
  if (flags & PyBUF_WRITABLE) {
    PyErr_SetString(PyExc_BufferError, "the engine's series is read-only");
    view->obj = NULL;
    return -1;
  }
  view->obj = Py_NewRef(self);
  view->buf = (void *)(self->data != NULL ? self->data : kEmpty);
  view->len = self->n * kDoubleSize;
  view->readonly = 1;
  view->itemsize = kDoubleSize;
  view->format = (flags & PyBUF_FORMAT) ? "d" : NULL;
  view->ndim = 1;
  view->shape = (flags & PyBUF_ND) ? &self->n : NULL;
  view->strides = (flags & PyBUF_STRIDES) ? &kDoubleSize : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

static PyBufferProcs SeriesBuffer_as_buffer = {.bf_getbuffer = (getbufferproc)SeriesBuffer_getbuffer};

static void SeriesBuffer_dealloc(SeriesBuffer *self) {
  Py_XDECREF(self->handle);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t SeriesBuffer_len(SeriesBuffer *self) { return self->n; }

static PySequenceMethods SeriesBuffer_as_sequence = {.sq_length = (lenfunc)SeriesBuffer_len};

static PyTypeObject SeriesBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ipcfloor._ipcfloor.SeriesBuffer",
    .tp_basicsize = sizeof(SeriesBuffer),
    .tp_dealloc = (destructor)SeriesBuffer_dealloc,
    .tp_as_buffer = &SeriesBuffer_as_buffer,
    .tp_as_sequence = &SeriesBuffer_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Closes of the engine's series in place: a read-only buffer of float64 ('d'), no copy.",
};

static PyObject *series_buffer(PyObject *handle, const double *data, size_t n) {
  SeriesBuffer *view = PyObject_New(SeriesBuffer, &SeriesBufferType);
  if (view == NULL) return NULL;
  view->handle = Py_NewRef(handle);
  view->data = data;
  view->n = (Py_ssize_t)n;
  return (PyObject *)view;
}

/* ---- Client ------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD
  ipcfloor_client *c; /* NULL once closed */
  PyObject *handle;   /* owns c; NULL once closed */
  int busy;           /* a call is in flight (read and written under the GIL only) */
  /* Fixed at attach; readable after close. */
  PyObject *engine, *wait, *name, *series_names, *near_cpus;
  /* Refreshed when the client re-attached (reconnect): the engine that came back's. */
  unsigned long long restarts;
  long long pid, bars, capacity;
  int serving_cpu;
  unsigned long long checksum;
  unsigned int lane, ring_capacity;
  double fee;
  char live;
} Client;

/* One call in flight: the client it runs on, kept alive by its own reference to the handle. */
typedef struct {
  ipcfloor_client *c;
  PyObject *handle;
} Call;

static int check_open(Client *self);

static int call_begin(Client *self, Call *call) {
  if (!check_open(self)) return 0;
  if (self->busy) {
    PyObject *message = PyUnicode_FromFormat(
        "engine %U: lane %u is in a call from another thread; an Engine serves one thread at a time (attach one "
        "Engine per thread)",
        self->engine, self->lane);
    if (message != NULL) {
      raise_error(error_class(IPCFLOOR_E_INVALID), IPCFLOOR_E_INVALID, PyUnicode_AsUTF8(message));
      Py_DECREF(message);
    }
    return 0;
  }
  self->busy = 1;
  call->c = self->c;
  call->handle = Py_NewRef(self->handle);
  return 1;
}

static int fill_metadata(Client *self, ipcfloor_client *c);

static void call_end(Client *self, Call *call) {
  self->busy = 0;
  /* A re-attach (reconnect) during the call: the metadata is the new engine's. A failure to
   * copy it keeps the old values (the call's own result or error stands). */
  if (self->c == call->c && ipcfloor_restarts(call->c) != self->restarts) {
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    if (!fill_metadata(self, call->c)) PyErr_Clear();
    PyErr_Restore(type, value, trace);
  }
  Py_DECREF(call->handle);
}

/* A call stopped by a signal handler's exception (check_signals) raises that exception;
 * every other failure its code's class. */
static PyObject *call_fail(Client *self, Call *call, int code) {
  if (!(code == IPCFLOOR_E_INTERRUPTED && PyErr_Occurred())) raise_code(call->c, code);
  call_end(self, call);
  return NULL;
}


/* The GIL while a call waits on the engine. It is handed over whenever another thread state
 * exists (another Python thread, in any interpreter: they share the GIL), so that thread runs
 * while this one waits. When this thread is the only one, nobody can be waiting for the GIL, and
 * handing it over and back would only add to the call (docs/RESULTS.md, call-floor-py-threads):
 * a thread that Python starts has its thread state before it first needs the GIL
 * (threading.Thread.start makes it under the GIL), so it is seen here. The one thread not seen
 * is C code entering Python for the first time (PyGILState_Ensure) during the call: it waits
 * until the call returns. The lists are read without the runtime's lock; a state added
 * concurrently is that case. Returns the state to give end_wait, NULL when the GIL was kept. */
static inline PyThreadState *begin_wait(void) {
  PyThreadState *self = PyThreadState_Get();
  PyInterpreterState *interp = PyThreadState_GetInterpreter(self);
  if (PyInterpreterState_Head() == interp && PyInterpreterState_Next(interp) == NULL &&
      PyInterpreterState_ThreadHead(interp) == self && PyThreadState_Next(self) == NULL)
    return NULL;
  return PyEval_SaveThread();
}

static inline void end_wait(PyThreadState *state) {
  if (state != NULL) PyEval_RestoreThread(state);
}

/* The library's interrupt check (ipcfloor_set_interrupt) for a handle's client, asked by a
 * waiting call on the calling thread: takes the GIL back if the call handed it over, runs
 * Python's signal handlers, and stops the call (nonzero, the GIL kept, the handler's exception
 * set: KeyboardInterrupt for Ctrl-C) when one raised; else hands the GIL over again. Outside the
 * main thread PyErr_CheckSignals has nothing to run. */
static int check_signals(void *context) {
  Waiting *waiting = (Waiting *)context;
  if (waiting->saved != NULL) {
    PyEval_RestoreThread(waiting->saved);
    waiting->saved = NULL;
  }
  if (PyErr_CheckSignals() != 0) return 1;
  waiting->saved = begin_wait();
  return 0;
}

/* The call hands the GIL over while it waits (begin_wait), where check_signals finds it, and
 * takes it back after. */
static inline void call_wait(Call *call) { ((Handle *)call->handle)->waiting.saved = begin_wait(); }

static inline void call_resume(Call *call) {
  Waiting *waiting = &((Handle *)call->handle)->waiting;
  end_wait(waiting->saved);
  waiting->saved = NULL;
}

/* ---- Arguments --------------------------------------------------------------------------- */

/* Binds a FASTCALL call's arguments to `names` (positional first, then by keyword); the first
 * `required` must be there. out[i] is NULL for an optional one not given. 0 with TypeError. */
static int bind_args(const char *method, const char *const *names, int n, int required, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames, PyObject **out) {
  if (nargs > n) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", method, n, nargs);
    return 0;
  }
  for (int i = 0; i < n; ++i) out[i] = i < nargs ? args[i] : NULL;
  const Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, k);
    int i = 0;
    while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]) != 0) ++i;
    if (i == n || out[i] != NULL) {
      PyErr_Format(PyExc_TypeError, i == n ? "%s() got an unexpected keyword argument '%U'"
                                           : "%s() got multiple values for argument '%U'",
                   method, key);
      return 0;
    }
    out[i] = args[nargs + k];
  }
  for (int i = 0; i < required; ++i)
    if (out[i] == NULL) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", method, names[i]);
      return 0;
    }
  return 1;
}

/* The six windows when `seq` is a tuple or list of six exact ints within int64: 1, `out` filled.
 * 0 for any other form, with nothing raised: the slow path judges it. */
static int six_int64(PyObject *seq, int64_t out[6]) {
  if (!(PyTuple_CheckExact(seq) || PyList_CheckExact(seq)) || PySequence_Fast_GET_SIZE(seq) != 6) return 0;
  PyObject **items = PySequence_Fast_ITEMS(seq);
  for (int i = 0; i < 6; ++i) {
    if (!PyLong_CheckExact(items[i])) return 0;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(items[i], &overflow);
    if (overflow != 0) return 0;
    out[i] = (int64_t)v;
  }
  return 1;
}

/* A series argument: absent (0) or an exact int in [0, 2**32): 1, *index set; else 0. */
static int series_index(PyObject *series, uint32_t *index) {
  if (series == NULL) {
    *index = 0;
    return 1;
  }
  if (!PyLong_CheckExact(series)) return 0;
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(series, &overflow);
  if (overflow != 0 || v < 0 || v > (long long)UINT32_MAX) return 0;
  *index = (uint32_t)v;
  return 1;
}

/* self.<name>(args...), the Python slow path; absent optional arguments are left out. */
static PyObject *slow_path(Client *self, PyObject *name, PyObject *const *values, int n) {
  PyObject *args[4] = {(PyObject *)self, NULL, NULL, NULL};
  int given = 0;
  while (given < n && given < 3 && values[given] != NULL) {
    args[given + 1] = values[given];
    ++given;
  }
  return PyObject_VectorcallMethod(name, args, (size_t)(given + 1), NULL);
}

/* ---- Results ----------------------------------------------------------------------------- */

static PyObject *pnl_trades(double pnl, int64_t trades) {
  PyObject *result = PyTuple_New(2);
  if (result == NULL) return NULL;
  PyObject *a = PyFloat_FromDouble(pnl), *b = PyLong_FromLongLong(trades);
  if (a == NULL || b == NULL) {
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_DECREF(result);
    return NULL;
  }
  PyTuple_SET_ITEM(result, 0, a);
  PyTuple_SET_ITEM(result, 1, b);
  return result;
}

static PyObject *six_ints(const int64_t values[6]) {
  PyObject *result = PyTuple_New(6);
  if (result == NULL) return NULL;
  for (int i = 0; i < 6; ++i) {
    PyObject *v = PyLong_FromLongLong(values[i]);
    if (v == NULL) {
      Py_DECREF(result);
      return NULL;
    }
    PyTuple_SET_ITEM(result, i, v);
  }
  return result;
}

static PyObject *signal_of(const ipcfloor_signal *s) {
  PyObject *signal = PyStructSequence_New(signal_type);
  if (signal == NULL) return NULL;
  PyObject *fields[15] = {
      PyLong_FromUnsignedLongLong(s->bar), PyLong_FromUnsignedLong(s->subscription), PyFloat_FromDouble(s->value[0]),
      PyFloat_FromDouble(s->value[1]),        PyFloat_FromDouble(s->pnl),               PyLong_FromLongLong(s->trades),
      PyLong_FromUnsignedLongLong(s->tick), PyLong_FromUnsignedLong(s->dropped),   PyLong_FromLong(s->cross),
      PyLong_FromLong(s->position),      PyLong_FromUnsignedLong(s->flags),
      PyBool_FromLong(s->flags & IPCFLOOR_SIGNAL_GAP), PyBool_FromLong(s->flags & IPCFLOOR_SIGNAL_SNAPSHOT),
      PyBool_FromLong(s->flags & IPCFLOOR_SIGNAL_RESTART), PyLong_FromUnsignedLong(s->missed)};
  int ok = 1;
  for (int i = 0; i < 15; ++i) {
    if (fields[i] == NULL) ok = 0;
    PyStructSequence_SET_ITEM(signal, i, fields[i]); /* a NULL field is skipped by the dealloc */
  }
  if (!ok) Py_CLEAR(signal);
  return signal;
}

/* ---- Requests ---------------------------------------------------------------------------- */

/* backtest and _call_floor share every step; the floor's handle is NULL, which the library
 * refuses (E_INVALID) before it does anything: Python's own share of a call, no transport. */
static PyObject *backtest_or_floor(Client *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                   int floor) {
  static const char *const names[] = {"params", "series", "bars", "fee"};
  PyObject *given[4];
  if (!bind_args(floor ? "_call_floor" : "backtest", names, floor ? 2 : 4, 1, args, nargs, kwnames, given)) return NULL;
  if (!floor && (given[2] != NULL || given[3] != NULL)) {
    /* Options: Engine._backtest_options judges them and sends the request with them. */
    PyObject *values[5] = {(PyObject *)self};
    for (int i = 0; i < 4; ++i) values[i + 1] = given[i] != NULL ? given[i] : (i == 1 ? s_zero : Py_None);
    return PyObject_VectorcallMethod(s_backtest_options, values, 5, NULL);
  }
  int64_t params[6];
  uint32_t index = 0;
  if (!six_int64(given[0], params) || !series_index(given[1], &index)) {
    if (floor) return PyErr_Format(PyExc_TypeError, "_call_floor takes six exact ints within int64");
    return slow_path(self, s_backtest_slow, given, 2);
  }
  Call call;
  if (!call_begin(self, &call)) return NULL;
  double pnl = 0.0;
  int64_t trades = 0;
  ipcfloor_client *c = floor ? NULL : call.c;
  call_wait(&call);
  const int code = ipcfloor_backtest_on(c, index, params, &pnl, &trades);
  call_resume(&call);
  if (code != (floor ? IPCFLOOR_E_INVALID : IPCFLOOR_OK)) return call_fail(self, &call, code);
  call_end(self, &call);
  return pnl_trades(pnl, trades);
}

static PyObject *Client_backtest(Client *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return backtest_or_floor(self, args, nargs, kwnames, 0);
}

static PyObject *Client_call_floor(Client *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return backtest_or_floor(self, args, nargs, kwnames, 1);
}

static PyObject *Client_echo(Client *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 1) return PyErr_Format(PyExc_TypeError, "echo() takes exactly one argument (%zd given)", nargs);
  int64_t in[6], out[6];
  if (!six_int64(args[0], in)) return slow_path(self, s_echo_slow, args, 1);
  Call call;
  if (!call_begin(self, &call)) return NULL;
  call_wait(&call);
  const int code = ipcfloor_echo(call.c, in, out);
  call_resume(&call);
  if (code != IPCFLOOR_OK) return call_fail(self, &call, code);
  call_end(self, &call);
  return six_ints(out);
}

/* Writable or read-only buffer `obj` of ndim `ndim`, `itemsize`-byte items of kind `kind` ('i'
 * signed integer, 'f' float), C-contiguous: 1 and `view` held; else 0 with TypeError (a guard of
 * a private method: Engine.sweep checks the arrays it passes first). */
static int typed_buffer(PyObject *obj, const char *what, int writable, int ndim, Py_ssize_t itemsize, char kind,
                        Py_buffer *view) {
  if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: not a C-contiguous%s buffer", what, writable ? " writable" : "");
    return 0;
  }
  const char *format = view->format;
  if (format[0] == '@' || format[0] == '=' || format[0] == '<') ++format; /* native: little-endian x86-64 */
  const int one_char = format[0] != '\0' && format[1] == '\0';
  const int signed_int = one_char && strchr("bhilq", format[0]) != NULL;
  const int is_float = one_char && format[0] == 'd';
  if (view->ndim != ndim || view->itemsize != itemsize || (kind == 'i' ? !signed_int : !is_float)) {
    PyErr_Format(PyExc_TypeError, "%s: want %d-D %s%zd, got %d-D format '%s'", what, ndim,
                 kind == 'i' ? "int" : "float", itemsize * 8, view->ndim, view->format);
    PyBuffer_Release(view);
    return 0;
  }
  return 1;
}

/* _sweep_into(combos, series, pnl, trades, status) -> refused: ipcfloor_sweep_on over arrays
 * Engine.sweep checked and made: combos (n, 6) int64, pnl float64[n], trades int64[n],
 * status int32[n]. One C call for the whole grid; no Python object per row. */
static PyObject *Client_sweep_into(Client *self, PyObject *const *args, Py_ssize_t nargs) {
  uint32_t index = 0;
  uint32_t strategy = 0;
  if ((nargs != 5 && nargs != 6) || !series_index(args[1], &index) || (nargs == 6 && !series_index(args[5], &strategy)))
    return PyErr_Format(PyExc_TypeError,
                        "_sweep_into(combos, series, pnl, trades, status[, strategy]): series and strategy uint32");
  Py_buffer views[4];
  static const char *const what[] = {"combos", "pnl", "trades", "status"};
  static const int ndims[] = {2, 1, 1, 1};
  static const Py_ssize_t sizes[] = {8, 8, 8, 4};
  static const char kinds[] = {'i', 'f', 'i', 'i'};
  int held = 0;
  while (held < 4 && typed_buffer(args[held == 0 ? 0 : held + 1], what[held], held > 0, ndims[held], sizes[held],
                                  kinds[held], &views[held]))
    ++held;
  PyObject *result = NULL;
  const Py_ssize_t n = held == 4 ? views[0].shape[0] : 0;
  if (held < 4) {
    /* a buffer was refused: its error is set */
  } else if (views[0].shape[1] != 6 || views[1].shape[0] != n || views[2].shape[0] != n || views[3].shape[0] != n) {
    PyErr_Format(PyExc_TypeError, "_sweep_into: combos (n, 6) and three outputs of n, got n = %zd", n);
  } else {
    Call call;
    if (call_begin(self, &call)) {
      call_wait(&call);
      const int refused = ipcfloor_sweep_with(call.c, strategy, index, (const int64_t(*)[6])views[0].buf, (size_t)n,
                                              (double *)views[1].buf, (int64_t *)views[2].buf, (int *)views[3].buf);
      call_resume(&call);
      if (refused < 0) {
        call_fail(self, &call, refused);
      } else {
        call_end(self, &call);
        result = PyLong_FromLong(refused);
      }
    }
  }
  for (int i = 0; i < held; ++i) PyBuffer_Release(&views[i]);
  return result;
}

/* ---- Requests with options: a range of bars, a fee, bars per year; statistics; trade lists -- */

/* The request tuple Engine builds (strategy, series, from_bar, to_bar, fee, bars_per_year), every
 * value judged there first: 1 with *request filled, else 0 with TypeError. */
static int request_of(PyObject *tuple, ipcfloor_request *request) {
  ipcfloor_request_init(request);
  unsigned long strategy = 0, series = 0;
  unsigned long long from_bar = 0, to_bar = 0;
  double fee = 0.0, bars_per_year = 0.0;
  if (!PyTuple_Check(tuple) ||
      !PyArg_ParseTuple(tuple, "kkKKdd", &strategy, &series, &from_bar, &to_bar, &fee, &bars_per_year) ||
      strategy > UINT32_MAX || series > UINT32_MAX) {
    PyErr_Clear();
    PyErr_SetString(PyExc_TypeError,
                    "request: (strategy, series, from_bar, to_bar, fee, bars_per_year), uint32 indices and uint64 bars");
    return 0;
  }
  request->strategy = (uint32_t)strategy;
  request->series = (uint32_t)series;
  request->from_bar = (uint64_t)from_bar;
  request->to_bar = (uint64_t)to_bar;
  request->fee = fee;
  request->bars_per_year = bars_per_year;
  return 1;
}

/* Writable C-contiguous buffer `obj` of exactly `bytes` bytes, whatever its item format (a numpy
 * record array laid out as a C struct, or fixed-size byte strings): 1 and `view` held; else 0
 * with TypeError. Engine makes these arrays with the dtypes the STATS_BYTES, TRADE_BYTES and
 * REASON_BYTES constants pin. */
static int raw_buffer(PyObject *obj, const char *what, Py_ssize_t bytes, Py_buffer *view) {
  if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: not a C-contiguous writable buffer", what);
    return 0;
  }
  if (view->len != bytes) {
    PyErr_Format(PyExc_TypeError, "%s: want %zd bytes, got %zd", what, bytes, view->len);
    PyBuffer_Release(view);
    return 0;
  }
  return 1;
}

/* _sweep_request_into(request, combos, pnl, trades, status, reasons) and
 * _sweep_stats_into(request, combos, stats, status, reasons) -> refused: ipcfloor_sweep_request /
 * ipcfloor_sweep_stats over arrays Engine.sweep made: combos (n, 6) int64, pnl float64[n] and
 * trades int64[n] or stats (n records of ipcfloor_stats), status int32[n], reasons n byte strings
 * of IPCFLOOR_REASON_BYTES. One C call for the whole grid; no Python object per row. */
static PyObject *sweep_request(Client *self, PyObject *const *args, Py_ssize_t nargs, int with_stats) {
  const char *method = with_stats ? "_sweep_stats_into" : "_sweep_request_into";
  ipcfloor_request request;
  if (nargs != (with_stats ? 5 : 6))
    return PyErr_Format(PyExc_TypeError, "%s takes %d arguments", method, with_stats ? 5 : 6);
  if (!request_of(args[0], &request)) return NULL;
  Py_buffer combos, status, reasons, outputs[2];
  if (!typed_buffer(args[1], "combos", 0, 2, 8, 'i', &combos)) return NULL;
  const Py_ssize_t n = combos.shape[0];
  int held = 0; /* outputs held */
  PyObject *result = NULL;
  const int outs = with_stats ? 1 : 2;
  int ok = combos.shape[1] == 6;
  if (!ok) PyErr_Format(PyExc_TypeError, "%s: combos (n, 6), got (n, %zd)", method, combos.shape[1]);
  if (ok && with_stats) ok = raw_buffer(args[2], "stats", n * (Py_ssize_t)sizeof(ipcfloor_stats), &outputs[held]);
  if (ok && !with_stats) ok = typed_buffer(args[2], "pnl", 1, 1, 8, 'f', &outputs[held]);
  held += ok;
  if (ok && !with_stats) held += ok = typed_buffer(args[3], "trades", 1, 1, 8, 'i', &outputs[held]);
  if (ok && !with_stats && (outputs[0].shape[0] != n || outputs[1].shape[0] != n)) {
    PyErr_Format(PyExc_TypeError, "%s: pnl and trades of n = %zd", method, n);
    ok = 0;
  }
  int have_status = 0, have_reasons = 0;
  if (ok) have_status = ok = typed_buffer(args[2 + outs], "status", 1, 1, 4, 'i', &status);
  if (ok && status.shape[0] != n) {
    PyErr_Format(PyExc_TypeError, "%s: status of n = %zd", method, n);
    ok = 0;
  }
  if (ok) have_reasons = ok = raw_buffer(args[3 + outs], "reasons", n * IPCFLOOR_REASON_BYTES, &reasons);
  Call call;
  if (ok && call_begin(self, &call)) {
    const int64_t(*params)[6] = (const int64_t(*)[6])combos.buf;
    char(*why)[IPCFLOOR_REASON_BYTES] = (char(*)[IPCFLOOR_REASON_BYTES])reasons.buf;
    call_wait(&call);
    const int refused =
        with_stats ? ipcfloor_sweep_stats(call.c, &request, params, (size_t)n, (ipcfloor_stats *)outputs[0].buf,
                                          (int *)status.buf, why)
                   : ipcfloor_sweep_request(call.c, &request, params, (size_t)n, (double *)outputs[0].buf,
                                            (int64_t *)outputs[1].buf, (int *)status.buf, why);
    call_resume(&call);
    if (refused < 0) {
      call_fail(self, &call, refused);
    } else {
      call_end(self, &call);
      result = PyLong_FromLong(refused);
    }
  }
  PyBuffer_Release(&combos);
  for (int i = 0; i < held; ++i) PyBuffer_Release(&outputs[i]);
  if (have_status) PyBuffer_Release(&status);
  if (have_reasons) PyBuffer_Release(&reasons);
  return result;
}

static PyObject *Client_sweep_request_into(Client *self, PyObject *const *args, Py_ssize_t nargs) {
  return sweep_request(self, args, nargs, 0);
}

static PyObject *Client_sweep_stats_into(Client *self, PyObject *const *args, Py_ssize_t nargs) {
  return sweep_request(self, args, nargs, 1);
}

/* _trades_into(request, params, trades, stats, equity) -> count: ipcfloor_trades for one combo
 * (params: six exact ints) into trades (capacity records of ipcfloor_trade; the buffer's bytes
 * say how many), stats (one ipcfloor_stats record) and equity (float64[ipcfloor_trades_bars]).
 * A count above the capacity is returned, not raised (IPCFLOOR_E_RESOURCE): call again with room
 * for it. Every other failure raises. */
static PyObject *Client_trades_into(Client *self, PyObject *const *args, Py_ssize_t nargs) {
  ipcfloor_request request;
  int64_t params[6];
  if (nargs != 5 || !six_int64(args[1], params))
    return PyErr_Format(PyExc_TypeError, "_trades_into(request, params: six ints, trades, stats, equity)");
  if (!request_of(args[0], &request) || !check_open(self)) return NULL;
  const uint64_t bars = ipcfloor_trades_bars(self->c, &request);
  Py_buffer trades, stats, equity;
  if (PyObject_GetBuffer(args[2], &trades, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) return NULL;
  const size_t capacity = (size_t)trades.len / sizeof(ipcfloor_trade);
  PyObject *result = NULL;
  if (raw_buffer(args[3], "stats", (Py_ssize_t)sizeof(ipcfloor_stats), &stats)) {
    if (raw_buffer(args[4], "equity", (Py_ssize_t)(bars * sizeof(double)), &equity)) {
      Call call;
      if (call_begin(self, &call)) {
        size_t count = 0;
        call_wait(&call);
        const int code = ipcfloor_trades(call.c, &request, params, (ipcfloor_trade *)trades.buf, capacity, &count,
                                         (ipcfloor_stats *)stats.buf, bars != 0 ? (double *)equity.buf : NULL);
        call_resume(&call);
        if (code == IPCFLOOR_OK || (code == IPCFLOOR_E_RESOURCE && count > capacity)) {
          call_end(self, &call);
          result = PyLong_FromSize_t(count);
        } else {
          call_fail(self, &call, code);
        }
      }
      PyBuffer_Release(&equity);
    }
    PyBuffer_Release(&stats);
  }
  PyBuffer_Release(&trades);
  return result;
}

/* _request_bars(request) -> the bars the request runs on (ipcfloor_trades_bars), 0 when the
 * engine holds no such series or range. */
static PyObject *Client_request_bars(Client *self, PyObject *arg) {
  ipcfloor_request request;
  if (!request_of(arg, &request) || !check_open(self)) return NULL;
  return PyLong_FromUnsignedLongLong(ipcfloor_trades_bars(self->c, &request));
}

/* ---- Live mode --------------------------------------------------------------------------- */

static PyObject *Client_append(Client *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"close", "tick"};
  PyObject *given[2];
  if (!bind_args("append", names, 2, 1, args, nargs, kwnames, given)) return NULL;
  unsigned long long tick = 0;
  int fast = PyFloat_CheckExact(given[0]);
  if (fast && given[1] != NULL) {
    fast = PyLong_CheckExact(given[1]);
    if (fast) {
      tick = PyLong_AsUnsignedLongLong(given[1]);
      if (tick == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or past 64 bits: the slow path says so */
        fast = 0;
      }
    }
  }
  if (!fast) return slow_path(self, s_append_slow, given, 2);
  const double close = PyFloat_AS_DOUBLE(given[0]);
  Call call;
  if (!call_begin(self, &call)) return NULL;
  uint64_t bars = 0;
  call_wait(&call);
  const int code = ipcfloor_append(call.c, close, (uint64_t)tick, &bars);
  call_resume(&call);
  if (code != IPCFLOOR_OK) return call_fail(self, &call, code);
  call_end(self, &call);
  return PyLong_FromUnsignedLongLong(bars);
}

static PyObject *Client_subscribe(Client *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const names[] = {"params", "with_state"};
  PyObject *given[2];
  if (!bind_args("subscribe", names, 2, 1, args, nargs, kwnames, given)) return NULL;
  int64_t params[6];
  const int with_state = given[1] != NULL ? PyObject_IsTrue(given[1]) : 0;
  if (with_state < 0) return NULL;
  if (!six_int64(given[0], params)) return slow_path(self, s_subscribe_slow, given, 2);
  Call call;
  if (!call_begin(self, &call)) return NULL;
  uint32_t id = 0;
  ipcfloor_signal state_after = {0};
  call_wait(&call);
  const int code = ipcfloor_subscribe(call.c, params, &id, with_state ? &state_after : NULL);
  call_resume(&call);
  if (code != IPCFLOOR_OK) return call_fail(self, &call, code);
  call_end(self, &call);
  if (!with_state) return PyLong_FromUnsignedLong(id);
  PyObject *signal = signal_of(&state_after);
  if (signal == NULL) return NULL;
  return Py_BuildValue("(kN)", (unsigned long)id, signal);
}

static PyObject *Client_snapshot(Client *self, PyObject *unused) {
  (void)unused;
  Call call;
  if (!call_begin(self, &call)) return NULL;
  call_wait(&call);
  const int code = ipcfloor_snapshot(call.c);
  call_resume(&call);
  if (code < 0) return call_fail(self, &call, code);
  call_end(self, &call);
  return PyLong_FromLong(code);
}

/* poll_signal never waits, so it keeps the GIL; wait_signal hands it over. */
static PyObject *signal_call(Client *self, int wait) {
  Call call;
  if (!call_begin(self, &call)) return NULL;
  ipcfloor_signal signal;
  int code;
  if (wait) {
    call_wait(&call);
    code = ipcfloor_wait_signal(call.c, &signal);
    call_resume(&call);
  } else {
    code = ipcfloor_poll_signal(call.c, &signal);
  }
  if (code == IPCFLOOR_NO_SIGNAL && !wait) {
    call_end(self, &call);
    Py_RETURN_NONE;
  }
  if (code != IPCFLOOR_OK) return call_fail(self, &call, code);
  call_end(self, &call);
  return signal_of(&signal);
}

static PyObject *Client_poll_signal(Client *self, PyObject *unused) {
  (void)unused;
  return signal_call(self, 0);
}

static PyObject *Client_wait_signal(Client *self, PyObject *unused) {
  (void)unused;
  return signal_call(self, 1);
}

/* ---- Lifetime, views and metadata -------------------------------------------------------- */

static PyObject *Client_close(Client *self, PyObject *unused) {
  (void)unused;
  self->c = NULL;
  Py_CLEAR(self->handle); /* a view, or a call in flight on another thread, may still hold it */
  Py_RETURN_NONE;
}

/* 1 while the Engine is open; else 0 with ipcfloor.Closed. */
static int check_open(Client *self) {
  if (self->c != NULL) return 1;
  PyObject *message = PyUnicode_FromFormat("engine %U: this Engine was closed", self->engine);
  if (message != NULL) {
    raise_error(closed_error != NULL ? closed_error : PyExc_RuntimeError, IPCFLOOR_E_INVALID,
                PyUnicode_AsUTF8(message));
    Py_DECREF(message);
  }
  return 0;
}

/* _series_buffer(index): series `index` of the table in place, or None past the table. */
static PyObject *Client_series_buffer(Client *self, PyObject *arg) {
  uint32_t index = 0;
  if (!series_index(arg, &index)) return PyErr_Format(PyExc_TypeError, "_series_buffer takes an int in [0, 2**32)");
  if (!check_open(self)) return NULL;
  if (index >= ipcfloor_series_count(self->c)) Py_RETURN_NONE;
  const double *data = NULL;
  const size_t n = ipcfloor_series_at(self->c, index, &data);
  return series_buffer(self->handle, data, n);
}

/* _column_buffer(index, column): column `column` (one IPCFLOOR_COLUMN_* bit) of series `index`
 * in place, or None where the series lacks it (or past the table). */
static PyObject *Client_column_buffer(Client *self, PyObject *const *args, Py_ssize_t nargs) {
  uint32_t index = 0;
  uint32_t column = 0;
  if (nargs != 2 || !series_index(args[0], &index) || !series_index(args[1], &column))
    return PyErr_Format(PyExc_TypeError, "_column_buffer takes two ints in [0, 2**32)");
  if (!check_open(self)) return NULL;
  const double *data = NULL;
  const size_t n = ipcfloor_series_column(self->c, index, column, &data);
  if (data == NULL) Py_RETURN_NONE;
  return series_buffer(self->handle, data, n);
}

/* _series_columns(index): IPCFLOOR_COLUMN_* bits of series `index` (0 past the table). */
static PyObject *Client_series_columns(Client *self, PyObject *arg) {
  uint32_t index = 0;
  if (!series_index(arg, &index)) return PyErr_Format(PyExc_TypeError, "_series_columns takes an int in [0, 2**32)");
  if (!check_open(self)) return NULL;
  return PyLong_FromUnsignedLong(ipcfloor_series_columns(self->c, index));
}

static PyObject *Client_published_buffer(Client *self, PyObject *unused) {
  (void)unused;
  if (!check_open(self)) return NULL;
  const double *data = NULL;
  const size_t n = ipcfloor_published_series(self->c, &data);
  return series_buffer(self->handle, data, n);
}

static PyObject *Client_get_closed(Client *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(self->c == NULL);
}

static PyObject *Client_get_restarts(Client *self, void *unused) {
  (void)unused;
  return PyLong_FromUnsignedLongLong(self->restarts);
}

static PyObject *Client_get_signals_dropped(Client *self, void *unused) {
  (void)unused;
  if (!check_open(self)) return NULL;
  return PyLong_FromUnsignedLongLong(ipcfloor_signals_dropped(self->c));
}

/* The strategy table: [(name, (param names), live), ...] by index (0: the built-in one). */
static PyObject *Client_strategies(Client *self, PyObject *unused) {
  (void)unused;
  if (!check_open(self)) return NULL;
  const uint32_t count = ipcfloor_strategy_count(self->c);
  PyObject *list = PyList_New((Py_ssize_t)count);
  if (list == NULL) return NULL;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t n = ipcfloor_strategy_param_count(self->c, i);
    PyObject *params = PyTuple_New((Py_ssize_t)n);
    if (params == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    for (uint32_t k = 0; k < n; ++k) {
      PyObject *name = PyUnicode_FromString(ipcfloor_strategy_param_name(self->c, i, k));
      if (name == NULL) {
        Py_DECREF(params);
        Py_DECREF(list);
        return NULL;
      }
      PyTuple_SET_ITEM(params, k, name);
    }
    PyObject *entry = Py_BuildValue("(sNO)", ipcfloor_strategy_name(self->c, i), params,
                                    ipcfloor_strategy_is_live(self->c, i) ? Py_True : Py_False);
    if (entry == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, entry);
  }
  return list;
}

static PyObject *Client_get_last_error(Client *self, void *unused) {
  (void)unused;
  const char *text = self->c != NULL ? ipcfloor_last_error(self->c) : "";
  return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
}

static void Client_dealloc(Client *self) {
  Py_XDECREF(self->handle);
  Py_XDECREF(self->engine);
  Py_XDECREF(self->wait);
  Py_XDECREF(self->name);
  Py_XDECREF(self->series_names);
  Py_XDECREF(self->near_cpus);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Each doc starts with its text signature ("name($self, ...)\n--\n\n"), which
 * inspect.signature reads; stubtest holds ipcfloor/_ipcfloor.pyi to them. */
static PyMethodDef Client_methods[] = {
    {"backtest", (PyCFunction)(void (*)(void))Client_backtest, METH_FASTCALL | METH_KEYWORDS,
     "backtest($self, params, series=0, bars=None, fee=None)\n--\n\n"
     "One combo through the lane -> (pnl, trades); a length L or six windows, or an (n, 6) array -> arrays. "
     "bars=slice(a, b) and fee= as Engine.sweep takes them."},
    {"_call_floor", (PyCFunction)(void (*)(void))Client_call_floor, METH_FASTCALL | METH_KEYWORDS,
     "_call_floor($self, params, series=0)\n--\n\n"
     "backtest's every step on a null handle the library refuses at once: Python's own share of a call."},
    {"echo", (PyCFunction)(void (*)(void))Client_echo, METH_FASTCALL,
     "echo($self, params, /)\n--\n\nSix ints: the 48 bytes to the engine and back."},
    {"_strategies", (PyCFunction)Client_strategies, METH_NOARGS,
     "_strategies($self, /)\n--\n\nThe engine's strategies by index: (name, parameter names, live)."},
    {"_sweep_into", (PyCFunction)(void (*)(void))Client_sweep_into, METH_FASTCALL,
     "_sweep_into($self, combos, series, pnl, trades, status, strategy=0, /)\n--\n\n"
     "ipcfloor_sweep_with into the arrays -> the number of refused combos."},
    {"_sweep_request_into", (PyCFunction)(void (*)(void))Client_sweep_request_into, METH_FASTCALL,
     "_sweep_request_into($self, request, combos, pnl, trades, status, reasons, /)\n--\n\n"
     "ipcfloor_sweep_request into the arrays -> the number of refused combos."},
    {"_sweep_stats_into", (PyCFunction)(void (*)(void))Client_sweep_stats_into, METH_FASTCALL,
     "_sweep_stats_into($self, request, combos, stats, status, reasons, /)\n--\n\n"
     "ipcfloor_sweep_stats into the arrays -> the number of refused combos."},
    {"_trades_into", (PyCFunction)(void (*)(void))Client_trades_into, METH_FASTCALL,
     "_trades_into($self, request, params, trades, stats, equity, /)\n--\n\n"
     "ipcfloor_trades into the arrays -> the combo's trade count (call again when it exceeds the room)."},
    {"_request_bars", (PyCFunction)Client_request_bars, METH_O,
     "_request_bars($self, request, /)\n--\n\nThe bars a request runs on (ipcfloor_trades_bars); 0: none."},
    {"append", (PyCFunction)(void (*)(void))Client_append, METH_FASTCALL | METH_KEYWORDS,
     "append($self, close, tick=0)\n--\n\nOne close appended to a live series -> the bars it holds now."},
    {"subscribe", (PyCFunction)(void (*)(void))Client_subscribe, METH_FASTCALL | METH_KEYWORDS,
     "subscribe($self, params, with_state=False)\n--\n\nA combo (or an (n, 6) array) -> its id, or (id, Signal)."},
    {"snapshot", (PyCFunction)Client_snapshot, METH_NOARGS,
     "snapshot($self, /)\n--\n\nOne Signal per subscription, now -> the number of subscriptions."},
    {"poll_signal", (PyCFunction)Client_poll_signal, METH_NOARGS,
     "poll_signal($self, /)\n--\n\nThe next Signal, or None: never waits."},
    {"wait_signal", (PyCFunction)Client_wait_signal, METH_NOARGS,
     "wait_signal($self, /)\n--\n\nThe next Signal, waiting up to the timeout (Timeout); Ctrl-C stops the wait."},
    {"close", (PyCFunction)Client_close, METH_NOARGS,
     "close($self, /)\n--\n\nGives the lane back once no view holds it."},
    {"_series_buffer", (PyCFunction)Client_series_buffer, METH_O,
     "_series_buffer($self, index, /)\n--\n\nSeries `index` in place, or None."},
    {"_column_buffer", (PyCFunction)(void (*)(void))Client_column_buffer, METH_FASTCALL,
     "_column_buffer($self, index, column, /)\n--\n\nColumn `column` (an IPCFLOOR_COLUMN_* bit) of series `index` in place, or None."},
    {"_series_columns", (PyCFunction)Client_series_columns, METH_O,
     "_series_columns($self, index, /)\n--\n\nThe IPCFLOOR_COLUMN_* bits of series `index`."},
    {"_published_buffer", (PyCFunction)Client_published_buffer, METH_NOARGS,
     "_published_buffer($self, /)\n--\n\nThe bars published so far, in place."},
    {NULL, NULL, 0, NULL},
};

/* Fixed at attach, read-only. */
#define CLIENT_MEMBER(name, type, field, doc) {name, type, offsetof(Client, field), READONLY, doc}
static PyMemberDef Client_members[] = {
    CLIENT_MEMBER("engine", T_OBJECT_EX, engine, "the engine's segment name"),
    CLIENT_MEMBER("wait", T_OBJECT_EX, wait, "the wait mode in use: spin, backoff or block"),
    CLIENT_MEMBER("name", T_OBJECT_EX, name, "where the main series came from"),
    CLIENT_MEMBER("_series_names", T_OBJECT_EX, series_names, "the series table's names"),
    CLIENT_MEMBER("pid", T_LONGLONG, pid, "the engine's pid"),
    CLIENT_MEMBER("serving_cpu", T_INT, serving_cpu, "the cpu of the engine's serving thread (-1: not said)"),
    CLIENT_MEMBER("near_cpus", T_OBJECT_EX, near_cpus, "the cpus nearest the serving thread, nearest first"),
    CLIENT_MEMBER("bars", T_LONGLONG, bars, "the main series' preloaded bars"),
    CLIENT_MEMBER("capacity", T_LONGLONG, capacity, "room for the series in bars"),
    CLIENT_MEMBER("checksum", T_ULONGLONG, checksum, "FNV-1a 64 of the main series"),
    CLIENT_MEMBER("lane", T_UINT, lane, "this Engine's lane"),
    CLIENT_MEMBER("ring_capacity", T_UINT, ring_capacity, "requests a sweep keeps in flight"),
    CLIENT_MEMBER("fee", T_DOUBLE, fee, "the fee per round trip, percentage points"),
    CLIENT_MEMBER("live", T_BOOL, live, "the engine takes appends and subscriptions"),
    {NULL, 0, 0, 0, NULL},
};
#undef CLIENT_MEMBER

static PyGetSetDef Client_getset[] = {
    {"closed", (getter)Client_get_closed, NULL, "True once close() ran", NULL},
    {"signals_dropped", (getter)Client_get_signals_dropped, NULL, "signals this lane lost to a full ring", NULL},
    {"restarts", (getter)Client_get_restarts, NULL, "engines this Engine re-attached to (reconnect=True)", NULL},
    {"last_error", (getter)Client_get_last_error, NULL, "the sentence behind this Engine's last failure", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ipcfloor._ipcfloor.Client",
    .tp_basicsize = sizeof(Client),
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "One claimed lane of an engine (ipcfloor.Engine derives from it; ipcfloor.attach makes one).",
    .tp_methods = Client_methods,
    .tp_members = Client_members,
    .tp_getset = Client_getset,
};

/* ---- Module functions -------------------------------------------------------------------- */

static PyObject *decoded(const char *text) {
  return PyUnicode_DecodeUTF8(text != NULL ? text : "", text != NULL ? (Py_ssize_t)strlen(text) : 0, "replace");
}

/* Copies the metadata of client c into `self`: at attach, and after a re-attach (reconnect), when
 * it is the engine that came back's. 0 with an error set (the fields already copied stay). */
static int fill_metadata(Client *self, ipcfloor_client *c) {
  static const char *const wait_names[] = {"engine", "spin", "backoff", "block"};
  const int32_t mode = ipcfloor_wait_mode(c);
  Py_XSETREF(self->engine, decoded(ipcfloor_engine_name(c)));
  Py_XSETREF(self->wait, decoded(mode >= 0 && mode <= 3 ? wait_names[mode] : "engine"));
  Py_XSETREF(self->name, decoded(ipcfloor_series_name(c)));
  const uint32_t count = ipcfloor_series_count(c);
  Py_XSETREF(self->series_names, PyTuple_New(count));
  if (self->engine == NULL || self->wait == NULL || self->name == NULL || self->series_names == NULL) return 0;
  for (uint32_t i = 0; i < count; ++i) {
    PyObject *key = decoded(ipcfloor_series_key(c, i));
    if (key == NULL) return 0;
    PyTuple_SET_ITEM(self->series_names, i, key);
  }
  int32_t near[64];
  const size_t near_count = ipcfloor_near_cpus(c, near, sizeof near / sizeof near[0]);
  Py_XSETREF(self->near_cpus, PyTuple_New((Py_ssize_t)(near_count < 64 ? near_count : 64)));
  if (self->near_cpus == NULL) return 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->near_cpus); ++i) {
    PyObject *cpu = PyLong_FromLong(near[i]);
    if (cpu == NULL) return 0;
    PyTuple_SET_ITEM(self->near_cpus, i, cpu);
  }
  self->serving_cpu = ipcfloor_serving_cpu(c);
  self->pid = ipcfloor_engine_pid(c);
  self->bars = (long long)ipcfloor_series(c, NULL);
  self->capacity = (long long)ipcfloor_capacity(c);
  self->checksum = ipcfloor_series_checksum(c);
  self->lane = ipcfloor_lane(c);
  self->ring_capacity = ipcfloor_ring_capacity(c);
  self->fee = ipcfloor_fee(c);
  self->live = (char)(ipcfloor_is_live(c) != 0);
  self->restarts = ipcfloor_restarts(c);
  return 1;
}

/* attach(cls, name: bytes, wait: int, timeout_ns: int, reconnect: int, reconnect_limit_ns: int) ->
 * cls: ipcfloor_attach_with, the GIL handed over while it waits for a lane. cls derives from
 * Client. */
static PyObject *module_attach(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  (void)module;
  ipcfloor_options options;
  ipcfloor_options_init(&options);
  if (nargs != 6 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &ClientType) ||
      !PyBytes_Check(args[1]) || !PyLong_CheckExact(args[2]) || !PyLong_CheckExact(args[3]) ||
      !PyLong_CheckExact(args[4]) || !PyLong_CheckExact(args[5]))
    return PyErr_Format(PyExc_TypeError, "attach(cls, name: bytes, wait: int, timeout_ns: int, reconnect: int, "
                                         "reconnect_limit_ns: int)");
  options.wait = (int32_t)PyLong_AsLong(args[2]);
  options.timeout_ns = PyLong_AsLongLong(args[3]);
  options.reconnect = (int32_t)PyLong_AsLong(args[4]);
  options.reconnect_limit_ns = PyLong_AsLongLong(args[5]);
  if (PyErr_Occurred()) return NULL;
  const char *name = PyBytes_AS_STRING(args[1]);
  int err = 0;
  ipcfloor_client *c = NULL;
  PyThreadState *state = begin_wait();
  c = ipcfloor_attach_with(name, &options, &err);
  end_wait(state);
  if (c == NULL) return raise_code(NULL, err);
  Handle *handle = PyObject_New(Handle, &HandleType);
  if (handle == NULL) {
    ipcfloor_detach(c);
    return NULL;
  }
  handle->c = c;
  handle->waiting.saved = NULL;
  if (ipcfloor_set_interrupt(c, check_signals, &handle->waiting, kSignalCheckNs) != IPCFLOOR_OK) {
    Py_DECREF(handle);
    return raise_error(error_class(IPCFLOOR_E_INTERNAL), IPCFLOOR_E_INTERNAL, "ipcfloor_set_interrupt refused");
  }
  PyTypeObject *cls = (PyTypeObject *)args[0];
  Client *self = (Client *)cls->tp_alloc(cls, 0);
  if (self == NULL) {
    Py_DECREF(handle);
    return NULL;
  }
  self->c = c;
  self->handle = (PyObject *)handle;
  if (!fill_metadata(self, c)) Py_CLEAR(self);
  return (PyObject *)self;
}

/* _configure(base, by_code, closed): the exception classes ipcfloor defines. */
static PyObject *module_configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 3 || !PyDict_Check(args[1]))
    return PyErr_Format(PyExc_TypeError, "_configure(base, by_code: dict, closed)");
  Py_XSETREF(base_error, Py_NewRef(args[0]));
  Py_XSETREF(closed_error, Py_NewRef(args[2]));
  for (int code = 1; code <= kCodes; ++code) {
    PyObject *key = PyLong_FromLong(-code);
    if (key == NULL) return NULL;
    PyObject *cls = PyDict_GetItemWithError(args[1], key);
    Py_DECREF(key);
    if (cls == NULL && PyErr_Occurred()) return NULL;
    Py_XSETREF(error_classes[code], Py_XNewRef(cls));
  }
  Py_RETURN_NONE;
}

/* combo_from_length(length: int) -> six ints, the C ABI's rule (round half to even, floor 1). */
static PyObject *module_combo_from_length(PyObject *module, PyObject *arg) {
  (void)module;
  int overflow = 0;
  const long long length = PyLong_CheckExact(arg) ? PyLong_AsLongLongAndOverflow(arg, &overflow) : 0;
  int64_t params[6];
  if (!PyLong_CheckExact(arg) || overflow != 0 || ipcfloor_combo_from_length(length, params) != IPCFLOOR_OK)
    return PyErr_Format(PyExc_ValueError, "combo_from_length takes an int in [1, 2**63)");
  return six_ints(params);
}

static PyObject *module_strerror(PyObject *module, PyObject *arg) {
  (void)module;
  const long code = PyLong_AsLong(arg);
  if (code == -1 && PyErr_Occurred()) return NULL;
  return decoded(ipcfloor_strerror((int)code));
}

static PyObject *module_version(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return decoded(ipcfloor_version_string());
}

static PyMethodDef module_methods[] = {
    {"attach", (PyCFunction)(void (*)(void))module_attach, METH_FASTCALL,
     "attach(cls, name, wait, timeout_ns, reconnect, reconnect_limit_ns, /)\n--\n\n"
     "ipcfloor_attach_with -> a cls (a Client) on a claimed lane."},
    {"_configure", (PyCFunction)(void (*)(void))module_configure, METH_FASTCALL,
     "_configure(base, by_code, closed, /)\n--\n\nThe exception classes the extension raises."},
    {"combo_from_length", module_combo_from_length, METH_O,
     "combo_from_length(length, /)\n--\n\nThe six windows of a length, by the C ABI."},
    {"strerror", module_strerror, METH_O, "strerror(code, /)\n--\n\nThe C ABI's fixed name of a code."},
    {"version", module_version, METH_NOARGS, "version()\n--\n\nThe C library's version, MAJOR.MINOR.PATCH."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ipcfloor._ipcfloor", "The ipcfloor package's binding of libipcfloor (ipcfloor.h).", -1,
    module_methods,        NULL,                 NULL,                                                            NULL,
    NULL,
};

static PyStructSequence_Field signal_fields[] = {
    {"bar", "0-based index of the bar in the whole series"},
    {"subscription", "the id subscribe gave the combo"},
    {"value0", "the strategy's first value after this bar (the built-in's HMA; NaN while it warms up)"},
    {"value1", "the strategy's second value after this bar (the built-in's HMA3; NaN while it warms up)"},
    {"pnl", "percentage points, net of fees, up to this bar"},
    {"trades", "closed round trips up to this bar"},
    {"tick", "the tick the append of this bar carried (0 in a snapshot)"},
    {"dropped", "signals of this lane lost just before this one"},
    {"cross", "+1 a long entry or reversal here (the built-in: HMA3 crossed above HMA), -1 a short one, 0 none"},
    {"position", "after this bar: +1 long, -1 short, 0 flat"},
    {"flags", "IPCFLOOR_SIGNAL_GAP | IPCFLOOR_SIGNAL_SNAPSHOT | IPCFLOOR_SIGNAL_RESTART"},
    {"gap", "signals of this lane were dropped before this one: ask for a snapshot"},
    {"snapshot", "a state asked for (snapshot, subscribe), not a new bar"},
    {"restart", "the first signal of this subscription since the Engine re-attached to a restarted engine"},
    {"missed", "with restart: the bars this subscription did not see as they happened; else 0"},
    {NULL, NULL},
};

static PyStructSequence_Desc signal_desc = {
    "ipcfloor.Signal", "One subscribed combo's state after one bar, as the batch kernel has it after that bar.",
    signal_fields, 11, /* gap, snapshot, restart and missed are attributes only: the tuple is the 11 fields */
};

/* The constants of ipcfloor.h the package names: every code, the signal flags, the wait modes. */
#define CONSTANT(name) {#name, IPCFLOOR_##name}
static const struct {
  const char *name;
  int value;
} constants[] = {
    CONSTANT(OK),
    CONSTANT(E_INVALID),
    CONSTANT(E_NO_ENGINE),
    CONSTANT(E_BUSY),
    CONSTANT(E_PERMISSION),
    CONSTANT(E_VERSION),
    CONSTANT(E_BAD_SEGMENT),
    CONSTANT(E_ENGINE_GONE),
    CONSTANT(E_ENGINE_HUNG),
    CONSTANT(E_TIMEOUT),
    CONSTANT(E_CORRUPT),
    CONSTANT(E_WINDOW),
    CONSTANT(E_REJECTED),
    CONSTANT(E_IO),
    CONSTANT(E_RESOURCE),
    CONSTANT(E_INTERNAL),
    CONSTANT(E_NOT_LIVE),
    CONSTANT(E_CAPACITY_FULL),
    CONSTANT(E_BAD_PRICE),
    CONSTANT(E_NOT_WRITER),
    CONSTANT(E_NO_ROOM),
    CONSTANT(E_NO_SUCH_SERIES),
    CONSTANT(E_FORKED),
    CONSTANT(E_INTERRUPTED),
    CONSTANT(E_NO_SUCH_STRATEGY),
    CONSTANT(E_NO_LIVE_STEP),
    CONSTANT(E_SIGNALS_FULL),
    CONSTANT(E_NO_TRADE_REPORT),
    CONSTANT(E_MISSING_COLUMN),
    CONSTANT(E_BAD_RANGE),
    CONSTANT(E_ENGINE_RESTARTED),
    CONSTANT(E_JOURNAL_FULL),
    CONSTANT(E_JOURNAL_FAILED),
    CONSTANT(NO_SIGNAL),
    CONSTANT(REASON_BYTES),
    CONSTANT(SIGNAL_GAP),
    CONSTANT(SIGNAL_SNAPSHOT),
    CONSTANT(SIGNAL_RESTART),
    CONSTANT(WAIT_ENGINE),
    CONSTANT(WAIT_SPIN),
    CONSTANT(WAIT_BACKOFF),
    CONSTANT(WAIT_BLOCK),
};
#undef CONSTANT
_Static_assert(-IPCFLOOR_E_JOURNAL_FAILED == kCodes, "kCodes is the last code of ipcfloor.h");
/* The record layouts Engine's numpy dtypes (ipcfloor/_engine.py) mirror, field by field. */
_Static_assert(sizeof(ipcfloor_stats) == 144 && offsetof(ipcfloor_stats, max_drawdown_bars) == 104 &&
                   offsetof(ipcfloor_stats, bars) == 136,
               "ipcfloor_stats: eighteen 8-byte fields, in ipcfloor.h's order");
_Static_assert(sizeof(ipcfloor_trade) == 48 && offsetof(ipcfloor_trade, pnl) == 32 &&
                   offsetof(ipcfloor_trade, side) == 40,
               "ipcfloor_trade: entry_bar, exit_bar, entry_price, exit_price, pnl, side, reserved");

PyMODINIT_FUNC PyInit__ipcfloor(void) {
  if (ipcfloor_version() / 10000 != IPCFLOOR_VERSION_MAJOR) {
    PyErr_Format(PyExc_ImportError, "libipcfloor is version %s; this package was built for major version %d",
                 ipcfloor_version_string(), IPCFLOOR_VERSION_MAJOR);
    return NULL;
  }
  if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&SeriesBufferType) < 0 || PyType_Ready(&ClientType) < 0)
    return NULL;
  signal_type = PyStructSequence_NewType(&signal_desc);
  if (signal_type == NULL) return NULL;
  s_backtest_slow = PyUnicode_InternFromString("_backtest_slow");
  s_echo_slow = PyUnicode_InternFromString("_echo_slow");
  s_subscribe_slow = PyUnicode_InternFromString("_subscribe_slow");
  s_append_slow = PyUnicode_InternFromString("_append_slow");
  s_backtest_options = PyUnicode_InternFromString("_backtest_options");
  s_zero = PyLong_FromLong(0);
  if (!s_backtest_slow || !s_echo_slow || !s_subscribe_slow || !s_append_slow || !s_backtest_options || !s_zero)
    return NULL;
  PyObject *module = PyModule_Create(&module_def);
  if (module == NULL) return NULL;
  if (PyModule_AddObjectRef(module, "Client", (PyObject *)&ClientType) < 0 ||
      PyModule_AddObjectRef(module, "SeriesBuffer", (PyObject *)&SeriesBufferType) < 0 ||
      PyModule_AddObjectRef(module, "Signal", (PyObject *)signal_type) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  for (size_t i = 0; i < sizeof constants / sizeof constants[0]; ++i)
    if (PyModule_AddIntConstant(module, constants[i].name, constants[i].value) < 0) {
      Py_DECREF(module);
      return NULL;
    }
  if (PyModule_AddIntConstant(module, "STATS_BYTES", (long)sizeof(ipcfloor_stats)) < 0 ||
      PyModule_AddIntConstant(module, "TRADE_BYTES", (long)sizeof(ipcfloor_trade)) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}

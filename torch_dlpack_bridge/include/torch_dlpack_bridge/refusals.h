/*!
 * \file torch_dlpack_bridge/refusals.h
 * \brief Why a tensor was refused: the lines that `tdb::explain_refusals(m)` (pybind11.h, nanobind.h) adds to
 *        the binding library's "f(): incompatible function arguments" TypeError, one per overload and tensor
 *        argument that a tdb parameter refused:
 *
 * \code{.txt}
 * Why the tensor arguments were refused:
 *     overload 1: argument 'y': expected dtype float32, got float16
 *     overload 2: argument 'y': expected dtype float64, got float16
 * \endcode
 *
 * How: neither binding library lets a caster reach its final message, and a caster is not told its parameter's
 * name or overload. So the function is wrapped once (its dispatch entry point); when a call fails with the
 * library's overload TypeError, the wrapper dispatches the same arguments once more with a thread-local record
 * open, in which every tdb caster notes what it took or refused and why; the record is matched against the
 * overloads and parameter names that the TypeError lists, and the lines are added to that TypeError's message.
 * A call that is taken never opens a record: the casters' accepted path reads one module-local counter. The
 * record lives on the failing call's stack and is this thread's only (free-threaded CPython too); a call made
 * while it is open (a `__dlpack__` that calls a kernel) notes nothing into it. An argument whose refusal no tdb
 * caster noted (a non-tensor parameter that did not convert) gets no line, nor does a tensor that its overload
 * took.
 *
 * Included by pybind11.h and nanobind.h; a kernel author never includes it directly.
 */
#ifndef TORCH_DLPACK_BRIDGE_REFUSALS_H_
#define TORCH_DLPACK_BRIDGE_REFUSALS_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/signature.h"

namespace tdb {
namespace detail {

/*! \brief What a caster did with `obj` (borrowed: an argument or a list's item, alive during the call). */
struct Noted {
  PyObject* obj;
  const char* param;  //!< the parameter's type as signatures show it (static text)
  std::string why;    //!< empty: taken
};
/*! \brief The notes of one explaining dispatch. */
using RefusalRecord = std::vector<Noted>;

/*! \brief How many dispatches of this module are being explained, on any thread: the casters' one read. */
TDB_MODULE_LOCAL inline std::atomic<int>& explaining() {
  static std::atomic<int> count{0};
  return count;
}
/*! \brief This thread's open record, or nullptr. */
TDB_MODULE_LOCAL inline RefusalRecord*& refusal_record() {
  static thread_local RefusalRecord* record = nullptr;
  return record;
}

/*! \brief The message without the "argument 'tensor': " that a view's checks start with (the caster's name). */
inline std::string without_argument(std::string why) {
  if (why.compare(0, 10, "argument '") == 0) {
    const size_t end = why.find("': ");
    if (end != std::string::npos) why.erase(0, end + 3);
  }
  return why;
}

/*! \brief True while this module explains a call, on any thread: the one test of the casters' accepted path. */
inline bool explaining_any() noexcept { return explaining().load(std::memory_order_relaxed) != 0; }

/*! \brief Notes `obj` in this thread's open record, if any; `why()` is asked for only then. Never throws. Out of
 *  line: the casters' accepted path stays as lean as before. */
template <class F>
TDB_NOINLINE void note(PyObject* obj, const char* param, F&& why) noexcept {
  RefusalRecord* record = refusal_record();
  if (!record) return;
  try {
    record->push_back(Noted{obj, param, why()});
  } catch (...) {  // out of memory: one line fewer
  }
}
/*! \brief A caster took `obj`: true, after noting it while explaining (a variant's next alternative may take
 *  what the first refused; such a tensor is not blamed). */
TDB_ALWAYS_INLINE inline bool taken(PyObject* obj, const char* param) noexcept {
  if (explaining_any()) note(obj, param, [] { return std::string(); });
  return true;
}
/*! \brief A caster refused `obj`, which is not a tensor: false, after noting it. */
inline bool refused_non_tensor(PyObject* obj, const char* param) noexcept {
  if (!explaining_any()) return false;
  note(obj, param, [obj] {
    return std::string("expected a tensor, got ") + (PyType_Check(obj) ? "the class '" : "'") +
           (PyType_Check(obj) ? reinterpret_cast<PyTypeObject*>(obj)->tp_name : Py_TYPE(obj)->tp_name) + "'";
  });
  return false;
}
/*! \brief A typed caster refused the view `v` of `obj`: notes the first constraint it violates, as
 *  `Value::check` words it (any refusal a constraint adds is picked up). */
template <class Value, class View>
void note_violation(PyObject* obj, const char* param, const View& v) noexcept {
  if (!explaining_any()) return;
  note(obj, param, [&v]() -> std::string {
    try {
      Value::check(v);
    } catch (const Error& e) {
      return without_argument(e.what());
    }
    return "refused";  // not reached: the caller saw a violation
  });
}

/*!
 * \brief For the binding casters: runs `fill` (which makes the caster's value); a refusal (any exception: the
 * producer's, a data-less tensor's) is noted with its message while explaining, its Python exception dropped,
 * and false lets the binding library try the next overload or raise its own TypeError. Never throws. Inlined
 * (as the view's constructors are): a call here costs about as much as the checks.
 */
template <class F>
TDB_ALWAYS_INLINE inline bool fill_or_note(F&& fill, PyObject* obj, const char* param) noexcept {
  if (guard([&fill]() -> PyObject* {
        fill();
        return Py_None;  // borrowed: only a success marker
      }))
    return true;
  if (explaining_any()) note(obj, param, [] {
    PyObject* exc = fetch_exception();
    PyObject* text = exc ? PyObject_Str(exc) : nullptr;
    const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
    std::string why = utf8 ? without_argument(utf8) : "refused by its producer";
    Py_XDECREF(text);
    Py_XDECREF(exc);
    return why;
  });
  PyErr_Clear();
  return false;
}

// ---------------------------------------------------------------------------------------------
// Matching the notes with the overloads the TypeError lists
// ---------------------------------------------------------------------------------------------

/*! \brief One parameter of a listed overload: its name and its annotation's text. */
struct Listed {
  std::string name, annotation;
  bool keyword_only;
};

/*! \brief Index of the bracket closing the one at `open` in `s` (quotes skipped), or npos. */
inline size_t closing(const std::string& s, size_t open) {
  int depth = 0;
  char quote = 0;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if ((c == ')' || c == ']' || c == '}') && --depth == 0) {
      return i;
    }
  }
  return std::string::npos;
}

/*! \brief The parameters of a signature as both libraries list it ("(x: T, a: float = 2.0) -> str"). */
inline std::vector<Listed> listed_parameters(const std::string& signature) {
  std::vector<Listed> out;
  const size_t open = signature.find('(');
  const size_t close = open == std::string::npos ? open : closing(signature, open);
  if (close == std::string::npos) return out;
  bool keyword_only = false;
  for (size_t start = open + 1; start < close;) {
    size_t end = start;  // the next comma outside brackets and quotes
    while (end < close && signature[end] != ',') {
      const char c = signature[end];
      const size_t skip = c == '(' || c == '[' || c == '{'  ? closing(signature, end)
                          : c == '\'' || c == '"' ? signature.find(c, end + 1)
                                                  : end;
      end = skip == std::string::npos || skip >= close ? close : skip + 1;
    }
    std::string p = signature.substr(start, end - start);
    start = end + 1;
    p.erase(0, p.find_first_not_of(' '));
    if (p == "/") continue;
    if (p == "*" || p.compare(0, 1, "*") == 0) {  // the rest is keyword-only (also after *args)
      keyword_only = true;
      continue;
    }
    const size_t colon = p.find(": ");
    const size_t equals = p.find(" = ");
    Listed l{p.substr(0, colon == std::string::npos ? equals : colon), std::string(), keyword_only};
    if (colon != std::string::npos) l.annotation = p.substr(colon + 2, equals == std::string::npos ? std::string::npos
                                                                                                  : equals - colon - 2);
    out.push_back(std::move(l));
  }
  return out;
}

/*! \brief The tdb parameter types an annotation holds ("typing.Annotated[...DLPackTensor, dict(...)]" or the bare
 *  tensor type), as the casters noted them: several in a variant. */
inline std::vector<std::string> tensor_types(const std::string& annotation) {
  static const std::string annotated = "typing.Annotated[";
  std::vector<std::string> out;
  for (size_t at = annotation.find(kSignatureTensor); at != std::string::npos;
       at = annotation.find(kSignatureTensor, at + 1)) {
    if (at >= annotated.size() && annotation.compare(at - annotated.size(), annotated.size(), annotated) == 0) {
      const size_t from = at - annotated.size();
      const size_t to = closing(annotation, from + annotated.size() - 1);
      if (to != std::string::npos) out.push_back(annotation.substr(from, to - from + 1));
    } else {
      out.push_back(kSignatureTensor);
    }
  }
  return out;
}

/*! \brief The lines for argument `value` (named `name`) of overload `k`: one per refused tensor, unless taken. */
inline void explain_argument(std::string& lines, int k, const std::string& name, PyObject* value,
                             const std::vector<std::string>& types, const RefusalRecord& record) {
  // A list's items are what a std::vector parameter's caster noted (a snapshot: other threads may change it).
  PyObject* items = (PyList_Check(value) || PyTuple_Check(value)) ? PySequence_Tuple(value) : nullptr;
  if (!items) PyErr_Clear();
  const Py_ssize_t n = items ? PyTuple_GET_SIZE(items) : 0;
  for (Py_ssize_t item = -1; item < n; ++item) {
    PyObject* obj = item < 0 ? value : PyTuple_GET_ITEM(items, item);
    bool took = false;
    std::vector<const std::string*> why;
    for (const Noted& noted : record) {
      if (noted.obj != obj) continue;
      bool here = false;
      for (const std::string& t : types) here |= t == noted.param;
      if (!here) continue;
      if (noted.why.empty()) took = true;
      else why.push_back(&noted.why);
    }
    if (took) continue;  // never blame a tensor that this overload took
    for (const std::string* w : why) {
      std::string line = "    overload " + std::to_string(k) + ": argument '" + name + "'" +
                         (item < 0 ? std::string() : ", item " + std::to_string(item)) + ": " + *w + "\n";
      if (lines.find(line) == std::string::npos) lines += line;  // both passes of a library note it again
    }
  }
  Py_XDECREF(items);
}

/*! \brief Adds the lines to `error` (the library's TypeError, listing the overloads); leaves it as it is if none
 *  or on any failure. Never throws; no Python exception is set before or after. */
inline void add_reasons(PyObject* error, const RefusalRecord& record, PyObject* const* args, size_t nargs,
                        PyObject* kwnames) noexcept {
  try {
    bool refused = false;
    for (const Noted& noted : record) refused |= !noted.why.empty();
    PyObject* text = refused ? PyObject_Str(error) : nullptr;
    const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
    std::string message = utf8 ? utf8 : "";
    Py_XDECREF(text);
    std::string lines;
    size_t at = message.find("supported:\n");
    for (at = at == std::string::npos ? at : at + 11; at != std::string::npos && at < message.size();) {
      const size_t eol = message.find('\n', at);
      const std::string line = message.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
      at = eol == std::string::npos ? eol : eol + 1;
      const size_t dot = line.find(". ");
      if (line.compare(0, 4, "    ") != 0 || dot == std::string::npos) break;  // the end of the list
      const int k = std::atoi(line.c_str() + 4);
      size_t position = 0;
      for (const Listed& p : listed_parameters(line.substr(dot + 2))) {
        PyObject* value = nullptr;
        if (!p.keyword_only && position < nargs) value = args[position];
        ++position;
        for (Py_ssize_t i = 0; !value && kwnames && i < PyTuple_GET_SIZE(kwnames); ++i) {
          const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
          if (key && p.name == key) value = args[nargs + i];
        }
        const std::vector<std::string> types = tensor_types(p.annotation);
        if (value && !types.empty()) explain_argument(lines, k, p.name, value, types, record);
      }
    }
    if (!lines.empty()) {
      message += "\n\nWhy the tensor arguments were refused:\n" + lines.substr(0, lines.size() - 1);
      PyObject* new_args = Py_BuildValue("(s)", message.c_str());
      if (new_args) PyObject_SetAttrString(error, "args", new_args);
      Py_XDECREF(new_args);
    }
  } catch (...) {  // out of memory: the library's message as it is
  }
  PyErr_Clear();
}

/*! \brief A binding library's dispatch of one call: `fn(callee, args, nargsf, kwnames)`, and the function's name. */
struct Dispatch {
  PyObject* (*fn)(PyObject*, PyObject* const*, size_t, PyObject*);
  PyObject* callee;
  PyObject* const* args;
  size_t nargsf;
  PyObject* kwnames;
  std::string (*name)(PyObject* callee);  //!< asked only when the call failed
  PyObject* operator()() const { return fn(callee, args, nargsf, kwnames); }
};


/*!
 * \brief The failed dispatch `d`: when its error is the library's overload TypeError, dispatches once more with a
 * record open and adds the reasons to that TypeError. If the second dispatch is taken (a producer that changed
 * its answer), its result is the call's; another exception from it is the call's too.
 */
TDB_NOINLINE inline PyObject* explain(const Dispatch& d) {
  PyObject* error = fetch_exception();
  PyObject* text = error && Py_TYPE(error) == reinterpret_cast<PyTypeObject*>(PyExc_TypeError)
                       ? PyObject_Str(error) : nullptr;
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  // This function's own overload error: one that its body let through (another function's, with its own
  // arguments) must not make the body run again.
  const std::string name = d.name(d.callee), own = name + "(): incompatible ";
  const bool overloads = utf8 && !name.empty() && std::strncmp(utf8, own.c_str(), own.size()) == 0;
  Py_XDECREF(text);
  PyErr_Clear();
  if (!overloads) {
    restore_exception(error);
    return nullptr;
  }
  RefusalRecord record;
  RefusalRecord*& open = refusal_record();
  RefusalRecord* outer = open;
  open = &record;
  explaining().fetch_add(1, std::memory_order_relaxed);
  PyObject* again = d();
  explaining().fetch_sub(1, std::memory_order_relaxed);
  open = outer;
  PyObject* second = again ? nullptr : fetch_exception();
  if (again || !second || Py_TYPE(second) != reinterpret_cast<PyTypeObject*>(PyExc_TypeError)) {
    Py_XDECREF(error);
    restore_exception(second);
    return again;
  }
  Py_DECREF(second);
  add_reasons(error, record, d.args, static_cast<size_t>(PyVectorcall_NARGS(d.nargsf)), d.kwnames);
  restore_exception(error);
  return nullptr;
}

/*! \brief A dispatch made while this module explains another call (a `__dlpack__` calling a kernel): it notes
 *  nothing into the open record, and is explained with a record of its own. */
TDB_NOINLINE inline PyObject* dispatch_aside(const Dispatch& d) {
  RefusalRecord*& record = refusal_record();
  RefusalRecord* open = record;
  record = nullptr;
  PyObject* result = d();
  if (!result) result = explain(d);
  record = open;
  return result;
}

/*! \brief A wrapped function's call: the library's dispatch, explained when it fails (one test when it does not). */
TDB_ALWAYS_INLINE inline PyObject* dispatch_explained(const Dispatch& d) {
  if (explaining().load(std::memory_order_relaxed) != 0) return dispatch_aside(d);
  PyObject* result = d();
  return result ? result : explain(d);
}

/*!
 * \brief Calls `wrap` on every function of `scope` (a module: its functions, its classes' methods and static
 * methods, its submodules named under it), which wraps those of its binding library in this module.
 */
inline void wrap_functions(PyObject* scope, bool (*wrap)(PyObject*), int depth = 0) {
  PyObject* dict = PyObject_GetAttrString(scope, "__dict__");  // a module's dict, a class's mapping proxy
  PyObject* values = dict ? PyMapping_Values(dict) : nullptr;
  Py_XDECREF(dict);
  const char* scope_name = PyModule_Check(scope) ? PyModule_GetName(scope) : nullptr;
  for (Py_ssize_t i = 0; values && i < PyList_GET_SIZE(values); ++i) {
    PyObject* v = PyList_GET_ITEM(values, i);
    if (wrap(v)) continue;
    if (PyInstanceMethod_Check(v)) {  // pybind11's methods
      wrap(PyInstanceMethod_GET_FUNCTION(v));
    } else if (Py_IS_TYPE(v, &PyStaticMethod_Type) || Py_IS_TYPE(v, &PyClassMethod_Type)) {
      if (PyObject* f = PyObject_GetAttrString(v, "__func__")) {
        wrap(f);
        Py_DECREF(f);
      }
    } else if (depth < 3 && PyType_Check(v)) {
      wrap_functions(v, wrap, depth + 1);  // the module's classes and their nested classes
    } else if (scope_name && PyModule_Check(v)) {
      const char* name = PyModule_GetName(v);  // a submodule (m.def_submodule), not another module it holds
      const size_t n = std::strlen(scope_name);
      if (name && std::strncmp(name, scope_name, n) == 0 && name[n] == '.') wrap_functions(v, wrap, depth);
    }
    PyErr_Clear();
  }
  Py_XDECREF(values);
  PyErr_Clear();
}

}  // namespace detail
}  // namespace tdb

#endif  // TORCH_DLPACK_BRIDGE_REFUSALS_H_

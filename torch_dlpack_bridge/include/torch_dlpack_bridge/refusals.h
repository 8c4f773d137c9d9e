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
 * Included by pybind11.h and nanobind.h; a kernel author never includes it directly.
 */
// How the lines are found: neither binding library lets a caster reach its final message, nor tells it its parameter's
// name or overload, so `explain_refusals` wraps the entry point of each function with a tdb tensor parameter in some
// overload (pybind11 3: its PyMethodDef's dispatcher; nanobind: its vectorcall slot; any other function has nothing to
// explain and is left as it is) and calls the library's dispatch once. A refusing caster says nothing then; only when
// the dispatch fails with the library's own overload TypeError for this call (its function's name, raised by the
// dispatcher itself: no traceback yet, not marked by a wrapped call made inside it, and no lines yet) does the wrapper
// read the overloads and parameters that the TypeError lists (a constructor's listing has no `self`; keyword-only and
// defaulted parameters by name; an overload the arguments cannot bind to is left out), and ask each tdb parameter type
// there, through the check its caster registered when the module was loaded, why it refuses its argument (or a list's
// first refused item): the same words its checks give. A tensor with a table is described again through it, which runs
// no Python code and changes nothing; one taken through `__dlpack__` is described from the export the call kept
// (call.h: each such producer is asked once per call, however many overloads try it, and never again to word a
// refusal), and a producer's own refusal is worded from the exception it raised, noted when it raised it: both are kept
// in the call's own record (call.h). Nothing is dispatched again: a call runs its body once with the arguments given,
// or is refused and no body ran. An accepted call that kept nothing pays for listing its record with its frame and
// taking it off, and nothing per tensor. A type that takes its argument is not blamed; an argument that no tdb
// parameter refuses (a non-tensor parameter that did not convert) gets no line, nor does an item of an iterable that is
// not a list or a tuple (a generator: its items are gone). A tensor argument is explained whether or not the library
// reached it (an earlier argument may have failed first), and as it is when the call fails: one that a converter or
// another thread changed meanwhile is worded as it is then. Functions defined after `explain_refusals` are not wrapped
// (neither library has a hook where a function is defined): their refusals say no more than the library's message. One
// error is not told apart: a body that lets through, with no Python frame between (a `functools.partial` callback), the
// same-named overload TypeError of a module's function that is not wrapped; the call's lines are then added to it.
#ifndef TORCH_DLPACK_BRIDGE_REFUSALS_H_
#define TORCH_DLPACK_BRIDGE_REFUSALS_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "torch_dlpack_bridge/call.h"
#include "torch_dlpack_bridge/config.h"
#include "torch_dlpack_bridge/errors.h"
#include "torch_dlpack_bridge/signature.h"
#include "torch_dlpack_bridge/view.h"

namespace tdb {
namespace detail {

/*! \brief The message without the "argument 'tensor': " that a view's checks start with (the caster's name). */
inline std::string without_argument(std::string why) {
  if (why.compare(0, 10, "argument '") == 0) {
    const size_t end = why.find("': ");
    if (end != std::string::npos) why.erase(0, end + 3);
  }
  return why;
}

/*! \brief The words of a producer's refusal: its exception's message (`exc` borrowed; nullptr: none known). */
inline std::string exception_words(PyObject* exc) {
  PyObject* text = exc ? PyObject_Str(exc) : nullptr;
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  std::string why = utf8 ? without_argument(utf8) : "refused by its producer";
  Py_XDECREF(text);
  PyErr_Clear();
  return why;
}

/*! \brief The words of a non-tensor's refusal. */
inline std::string non_tensor_why(PyObject* obj) {
  const bool type = PyType_Check(obj);
  return std::string("expected a tensor, got ") + (type ? "the class '" : "'") +
         (type ? reinterpret_cast<PyTypeObject*>(obj)->tp_name : Py_TYPE(obj)->tp_name) + "'";
}

/*!
 * \brief What a tdb parameter type says of `obj` once a call is refused: true when it takes it; false with `why`
 * set to why not (a non-tensor; the producer's refusal; the first constraint violated, as the type's checks word
 * it); false with `why` empty when nothing can be said without asking a producer again.
 */
using Recheck = bool (*)(PyObject* obj, std::string& why);

/*! \brief This module's rechecks by parameter type, as signatures show it: each caster registers its own. */
TDB_MODULE_LOCAL inline std::unordered_map<std::string, Recheck>& rechecks() {
  static auto* by_type = new std::unordered_map<std::string, Recheck>();  // never destroyed: calls at exit
  return *by_type;
}
/*! \brief Registers the recheck of parameter type `param` (at the module's load); true. */
inline bool register_recheck(const char* param, Recheck recheck) noexcept {
  try {
    rechecks().emplace(param, recheck);
  } catch (...) {  // out of memory: no lines for this type
  }
  return true;
}

/*!
 * \brief The Recheck of a `Value` parameter (tdb::TensorView, or a tdb::Tensor<...> and its checks). A tensor with
 * a table is described again through it (a table's export runs no Python code and changes nothing); one taken
 * through `__dlpack__` from the export its call kept (call.h), never by asking its producer again.
 */
template <class Value>
bool recheck(PyObject* obj, std::string& why) {
  if (!is_dlpack_tensor(obj)) {
    why = non_tensor_why(obj);
    return false;
  }
  try {
    const DLPackExchangeAPI* api = find_exchange_api(Py_TYPE(obj));
    const DLManagedTensorVersioned* kept = api ? nullptr : kept_export(obj);
    if (!api && !kept) return false;  // its producer refused (noted) or was never asked
    const TensorView v = api ? TensorView(obj, api, "tensor")
                             : TensorView(described, obj, kept->dl_tensor,
                                          (kept->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0, "tensor");
    if constexpr (!std::is_same<Value, TensorView>::value) Value::check(v);
    return true;
  } catch (const Error& e) {
    if (e.is_pending()) {  // the producer's refusal: its words are its exception's
      PyObject* raised = fetch_exception();
      why = exception_words(raised);
      Py_XDECREF(raised);
    } else {
      why = without_argument(e.what());
    }
    PyErr_Clear();
  } catch (...) {  // out of memory
    PyErr_Clear();
  }
  return false;
}

/*! \brief The words of a producer's noted refusal. */
inline std::string producer_why(const Noted& n) { return exception_words(n.error); }

/*!
 * \brief For the binding casters: runs `fill` (which makes the caster's value); a refusal (a TypeError or
 * BufferError: the producer's, a data-less tensor's; refusal_raised()) is noted with its exception in a wrapped
 * call, its Python exception dropped, and false lets the binding library try the next overload or raise its own
 * TypeError. Any other exception (KeyboardInterrupt, MemoryError, ...) is left raised, as it is, with false: the
 * caster raises it (pybind11.h, nanobind.h). Never throws. Inlined (as the view's constructors are): a call here
 * costs about as much as the checks.
 */
template <class F>
TDB_ALWAYS_INLINE inline bool fill_or_note(F&& fill, PyObject* obj, const char* param) noexcept {
  if (guard([&fill]() -> PyObject* {
        fill();
        return Py_None;  // borrowed: only a success marker
      }))
    return true;
  if (!refusal_raised()) return false;  // not about the tensor: the caster raises it
  note_refusal(obj, param, fetch_exception());
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
  bool has_default;
  bool variadic;  //!< `*args` or `**kwargs` (the name keeps its stars)
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
    const size_t colon = p.find(": ");
    const size_t equals = p.find(" = ");
    if (p.compare(0, 1, "*") == 0) {  // the rest is keyword-only (also after *args)
      keyword_only = true;
      if (p != "*") out.push_back(Listed{p.substr(0, colon), std::string(), true, true, true});
      continue;
    }
    Listed l{p.substr(0, colon == std::string::npos ? equals : colon), std::string(), keyword_only,
             equals != std::string::npos, false};
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

/*! \brief What starts the lines added to a TypeError. */
constexpr const char kWhy[] = "\n\nWhy the tensor arguments were refused:\n";

/*! \brief The producers' refusals that a call noted, by object (each argument and item is looked up once). */
using NotesByObject = std::unordered_map<PyObject*, std::vector<const Noted*>>;
inline NotesByObject notes_by_object(const Noted* first, const Noted* last) {
  NotesByObject out;
  for (const Noted* at = first; at != last; ++at) out[at->obj].push_back(at);
  return out;
}

/*! \brief The reason lines being made, each once (both passes of a library note a refusal again). */
struct Lines {
  std::string text;
  std::unordered_set<std::string> seen;
  void add(std::string line) {
    if (seen.insert(line).second) text += line;
  }
};

/*! \brief Whether an annotation holds its tdb types in a sequence (a std::vector parameter's). */
inline bool sequence_of_tensors(const std::string& annotation) {
  const std::string before = annotation.substr(0, annotation.find(kSignatureTensor));
  return before.find("Sequence[") != std::string::npos || before.find("list[") != std::string::npos ||
         before.find("List[") != std::string::npos;
}
/*! \brief Whether an annotation takes None (a std::optional parameter's). */
inline bool optional_annotation(const std::string& annotation) {
  const std::string none = " | None";
  const size_t n = annotation.size();
  return annotation.compare(0, 16, "typing.Optional[") == 0 ||
         (n >= none.size() && annotation.compare(n - none.size(), none.size(), none) == 0);
}

/*!
 * \brief The lines for argument `value` (named `name`, annotated `annotation`) of overload `k`: why each tdb type of
 * the annotation refuses the value (a producer's noted refusal, or the type's recheck), unless one of them takes
 * it; for a sequence parameter, the same for the first item of a list or tuple that is refused (the library's
 * caster stops there), and nothing for another iterable (a generator: its items are gone).
 */
inline void explain_argument(Lines& lines, int k, const std::string& name, PyObject* value,
                             const std::string& annotation, const NotesByObject& notes) {
  const std::vector<std::string> types = tensor_types(annotation);
  if (types.empty() || (value == Py_None && optional_annotation(annotation))) return;
  PyObject* items = nullptr;  // a snapshot: other threads may change the list
  if (sequence_of_tensors(annotation)) {
    if (!PyList_Check(value) && !PyTuple_Check(value)) return;
    if (!(items = PySequence_Tuple(value))) return PyErr_Clear();
  }
  const Py_ssize_t n = items ? PyTuple_GET_SIZE(items) : 1;
  for (Py_ssize_t item = 0; item < n; ++item) {
    PyObject* obj = items ? PyTuple_GET_ITEM(items, item) : value;
    const auto noted = notes.find(obj);
    bool took = false;
    std::vector<std::string> why;
    for (const std::string& type : types) {
      bool said = false;  // a producer's refusal, noted: never asked again
      for (size_t i = 0; noted != notes.end() && i < noted->second.size(); ++i) {
        if (type != noted->second[i]->param) continue;
        why.push_back(producer_why(*noted->second[i]));
        said = true;
      }
      const auto recheck = said ? rechecks().end() : rechecks().find(type);
      std::string words;
      if (recheck != rechecks().end() && recheck->second(obj, words)) took = true;
      if (!words.empty()) why.push_back(std::move(words));
    }
    if (took || why.empty()) continue;  // never blame a tensor that this overload takes
    for (const std::string& w : why)
      lines.add("    overload " + std::to_string(k) + ": argument '" + name + "'" +
                (items ? ", item " + std::to_string(item) : std::string()) + ": " + w + "\n");
    break;
  }
  Py_XDECREF(items);
}

/*!
 * \brief The call's arguments bound to an overload's parameters (nullptr where none, e.g. a default), or nothing
 * when they cannot bind (too many, a missing required one, an unknown keyword): the library never tried its
 * converters, and no line is said of it.
 */
inline std::vector<PyObject*> bound(const std::vector<Listed>& params, PyObject* const* args, size_t nargs,
                                    PyObject* kwnames) {
  std::vector<PyObject*> values(params.size(), nullptr);
  size_t position = 0, used = 0;
  bool any_positional = false, any_keyword = false;
  for (size_t i = 0; i < params.size(); ++i) {
    const Listed& p = params[i];
    if (p.variadic) {
      (p.name.compare(0, 2, "**") == 0 ? any_keyword : any_positional) = true;
      continue;
    }
    if (!p.keyword_only && position < nargs) values[i] = args[position++];
    for (Py_ssize_t j = 0; !values[i] && kwnames && j < PyTuple_GET_SIZE(kwnames); ++j) {
      const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, j));
      if (key && p.name == key) values[i] = args[nargs + j], ++used;
    }
    if (!values[i] && !p.has_default) return {};
  }
  PyErr_Clear();
  const size_t keywords = kwnames ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames)) : 0;
  if ((position < nargs && !any_positional) || (used < keywords && !any_keyword)) return {};
  return values;
}

/*!
 * \brief Adds the lines to `error` (the library's TypeError, listing the overloads); leaves it as it is if none
 * or on any failure. `constructor`: the call's arguments start with `self`, which the listing leaves out.
 * Never throws; no Python exception is set before or after.
 */
inline void add_reasons(PyObject* error, const NotesByObject& notes, PyObject* const* args, size_t nargs,
                        PyObject* kwnames, bool constructor) noexcept {
  try {
    PyObject* text = PyObject_Str(error);
    const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
    std::string message = utf8 ? utf8 : "";
    Py_XDECREF(text);
    if (constructor && nargs > 0) {
      ++args;
      --nargs;
    }
    Lines lines;
    size_t at = message.find("supported:\n");
    for (at = at == std::string::npos ? at : at + 11; at != std::string::npos && at < message.size();) {
      const size_t eol = message.find('\n', at);
      const std::string line = message.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
      at = eol == std::string::npos ? eol : eol + 1;
      const size_t dot = line.find(". ");
      if (line.compare(0, 4, "    ") != 0 || dot == std::string::npos) break;  // the end of the list
      const int k = std::atoi(line.c_str() + 4);
      const std::vector<Listed> params = listed_parameters(line.substr(dot + 2));
      const std::vector<PyObject*> values = bound(params, args, nargs, kwnames);
      for (size_t i = 0; i < values.size(); ++i)
        if (values[i]) explain_argument(lines, k, params[i].name, values[i], params[i].annotation, notes);
    }
    if (!lines.text.empty()) {
      message += kWhy + lines.text.substr(0, lines.text.size() - 1);
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

/*! \brief The number of positional arguments in a vectorcall's `nargsf`, without the flags: CPython's offset bit,
 *  and the bit below it that nanobind sets for a constructor's trusted `self`. */
inline size_t positional_count(size_t nargsf) {
  return nargsf & ~(PY_VECTORCALL_ARGUMENTS_OFFSET | (PY_VECTORCALL_ARGUMENTS_OFFSET >> 1));
}

/*! \brief The attribute that marks a TypeError which a wrapped call (of any module) failed with. */
constexpr const char kFailedIn[] = "__tdb_failed_call__";

/*!
 * \brief Whether `error` is the overload TypeError that the library's dispatcher raised for this call, rather
 * than one a body let through (another call's, wrapped or not, of this function or another): it starts with the
 * function's name, has no traceback (no Python frame has seen it: a callback's error went through its frame),
 * was not marked by a wrapped call made inside this one (kFailedIn), and has no lines yet (those of a module
 * built with an older tdb). `constructor`: the listing leaves out `self`.
 */
inline bool own_overload_error(PyObject* error, const Dispatch& d, bool& constructor) {
  if (Py_TYPE(error) != reinterpret_cast<PyTypeObject*>(PyExc_TypeError)) return false;
  PyObject* traceback = PyException_GetTraceback(error);
  Py_XDECREF(traceback);
  if (traceback) return false;
  PyObject* dict = PyObject_GenericGetDict(error, nullptr);  // the instance's own attributes, made if need be
  const bool marked = dict && PyDict_GetItemString(dict, kFailedIn);
  Py_XDECREF(dict);
  PyErr_Clear();
  if (marked) return false;
  PyObject* text = PyObject_Str(error);
  const char* utf8 = text ? PyUnicode_AsUTF8(text) : nullptr;
  const std::string name = d.name(d.callee), own = name + "(): incompatible ";
  const bool yes = utf8 && std::strncmp(utf8, own.c_str(), own.size()) == 0 &&
                   !std::strstr(utf8, kWhy);  // explained already: a wrapped call's of an older module
  constructor = yes && std::strncmp(utf8 + own.size(), "constructor", 11) == 0;
  Py_XDECREF(text);
  PyErr_Clear();
  return yes;
}

/*!
 * \brief The end of a wrapped call that failed or whose record kept something (call.h): a failure the record kept (an
 * exception that was not a refusal: nanobind.h) is what the call raises, whatever the dispatch returned; else the
 * call's own overload TypeError gets the reasons from the record's notes. A TypeError the call fails with is marked,
 * so that an enclosing call does not take it for its own. The record's entries are released here. Returns `result`,
 * or nullptr with the exception raised.
 */
TDB_NOINLINE inline PyObject* explain(PyObject* result, const Dispatch& d, CallRecord& record) noexcept {
  PyObject* error = result ? nullptr : fetch_exception();
  Entries* kept = record.entries.get();
  bool constructor = false;
  if (kept && kept->failure) {
    if (error != kept->failure) {  // a body that took no tdb tensor ran, or the library refused the call
      Py_XDECREF(result);
      Py_XDECREF(error);
      result = nullptr;
      error = kept->failure;
      Py_INCREF(error);
    }
  } else if (error && own_overload_error(error, d, constructor)) {
    try {
      const Noted* notes = kept ? kept->notes.data() : nullptr;
      add_reasons(error, notes_by_object(notes, notes + (kept ? kept->notes.size() : 0)), d.args,
                  positional_count(d.nargsf), d.kwnames, constructor);
    } catch (...) {  // out of memory: the library's message as it is
    }
  }
  if (error && Py_TYPE(error) == reinterpret_cast<PyTypeObject*>(PyExc_TypeError)) {
    if (PyObject_SetAttrString(error, kFailedIn, Py_True) != 0) PyErr_Clear();
  }
  record.entries.reset();  // the producers' deleters and references, with no exception set
  restore_exception(error);
  return result;
}

/*!
 * \brief A wrapped function's call: the library's dispatch, once, with the call's record live (call.h); explained
 * when it fails or its record kept something.
 */
TDB_ALWAYS_INLINE inline PyObject* dispatch_explained(const Dispatch& d) {
  CallRecord record;  // live until the call returns (an unwinding thread too)
  PyObject* result = d();
  if (result && !record.entries) return result;
  const Dispatch copy = d;  // made here only: `d` stays in registers, its function called directly
  return explain(result, copy, record);
}

/*!
 * \brief Calls `wrap` on every function of `scope` (a module: its functions, its classes' methods, static methods
 * and properties' getters and setters, its submodules named under it), which wraps those of its library here.
 */
inline void wrap_functions(PyObject* scope, bool (*wrap)(PyObject*), int depth = 0) {
  claim_home_interpreter();
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
    } else if (PyObject_TypeCheck(v, &PyProperty_Type)) {  // a property's getter and setter (a static one's too)
      for (const char* accessor : {"fget", "fset"})
        if (PyObject* f = PyObject_GetAttrString(v, accessor)) {
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

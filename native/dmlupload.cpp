// dmlupload: upload a dmlbridge conversion to Direct3D 12 and read every tensor back through DirectML.
//
// Two programs in one:
//  * the example of loading a converted model natively: read the binding list (docs/bindings.md), create one
//    Direct3D 12 buffer per buffer file, upload the files, and bind each tensor to a DirectML operator as
//    DML_BUFFER_BINDING{buffer, OFFSET, TotalTensorSizeInBytes} together with its DML_BUFFER_TENSOR_DESC;
//  * the driver of dmlbridge's DirectML conformance tests: DirectML itself reads each tensor, through its own desc,
//    into a packed output of an exact type, and the bytes go to a dump file that the Python tests compare.
//
//   dmlupload BINDINGS [--dir DIR] [--dump FILE] [--only NAME]... [--probe-sizes] [--gemm RECORD=A.bin]...
//             [--self-test-only] [--debug]
//
// Exit status: 0 done (operators DirectML refused are reported, not fatal), 1 no usable device, 2 bad input
// (--debug without the debug layers too), 3 failed self-test, 4 device removed, 5 out of memory uploading a buffer.
// README.md in this folder lists the lines it prints.

#define WIN32_LEAN_AND_MEAN
#define NOMINMAX
#define _CRT_SECURE_NO_WARNINGS  // (MSVC: fopen and friends are fine here)
#ifdef __MINGW32__
// mingw's d3d12.h returns structs (GetCPUDescriptorHandleForHeapStart) the GCC way unless asked for MSVC's ABI,
// the one d3d12.dll implements.
#define WIDL_EXPLICIT_AGGREGATE_RETURNS
#endif
#include <windows.h>
#include <d3d12.h>
#include <d3d12sdklayers.h>  // (ID3D12Debug: --debug)
#include <wrl/client.h>

// DirectML.h uses two SAL annotations that the Windows SDK defines and mingw does not.
#ifndef _Inexpressible_
#define _Inexpressible_(x)
#endif
#ifndef _Maybenull_
#define _Maybenull_
#endif
#ifndef DML_TARGET_VERSION_USE_LATEST
#define DML_TARGET_VERSION_USE_LATEST  // else a Windows SDK's NTDDI_VERSION hides feature levels 6.3+ (UINT4, INT4)
#endif
#include "DirectML.h"

#include <sys/types.h>
#include <sys/stat.h>
#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>
#include <map>
#include <vector>

#ifdef __MINGW32__
// MSVC takes the IIDs from DirectML.h's __declspec(uuid); mingw's __uuidof (and so IID_PPV_ARGS) needs them declared.
__CRT_UUID_DECL(IDMLDevice, 0x6dbd6437, 0x96fd, 0x423f, 0xa9, 0x8c, 0xae, 0x5e, 0x7c, 0x2a, 0x57, 0x3f)
__CRT_UUID_DECL(IDMLOperator, 0x26caae7a, 0x3081, 0x4633, 0x95, 0x81, 0x22, 0x6f, 0xbe, 0x57, 0x69, 0x5d)
__CRT_UUID_DECL(IDMLCompiledOperator, 0x6b15e56a, 0xbf5c, 0x4902, 0x92, 0xd8, 0xda, 0x3a, 0x65, 0x0a, 0xfe, 0xa4)
__CRT_UUID_DECL(IDMLOperatorInitializer, 0x427c1113, 0x435c, 0x469c, 0x86, 0x76, 0x4d, 0x5d, 0xd0, 0x72, 0xf8, 0x13)
__CRT_UUID_DECL(IDMLBindingTable, 0x29c687dc, 0xde74, 0x4e3b, 0xab, 0x00, 0x11, 0x68, 0xf2, 0xfc, 0x3c, 0xfc)
__CRT_UUID_DECL(IDMLCommandRecorder, 0xe6857a76, 0x2e3e, 0x4fdd, 0xbf, 0xf4, 0x5d, 0x2b, 0xa1, 0x0f, 0xb4, 0x53)
#endif

using Microsoft::WRL::ComPtr;

static const UINT64 kChunk = 64ull << 20;     // uploads and readbacks go through one reused buffer of at most this
static const UINT64 kPatternSize = 1u << 20;  // the 0xA5 fill is copied from an upload buffer of this size

// ---------------------------------------------------------------------------------------------- small helpers

// One stdout line, flushed: the caller may parse a run a device loss ends.
static void Say(const char* format, ...) {
    va_list args;
    va_start(args, format);
    vprintf(format, args);
    va_end(args);
    putchar('\n');
    fflush(stdout);
}

[[noreturn]] static void BadInput(const std::string& message) {
    fflush(stdout);
    fprintf(stderr, "dmlupload: %s\n", message.c_str());
    exit(2);
}

// Test faults: DMLUPLOAD_FAULTS=NAME[,NAME...] makes one call fail, or one result change, as a broken device or a
// GPU with other float rules could, so that the test suite can check that the program notices (README.md lists
// them). Never set in normal use.
static const char* const kFaults[] = {"flush", "no-pattern", "no-feature-levels", "no-event", "skip-first-step",
                                      "hold-files"};
static bool Fault(const char* name) {
    static const char* const set = getenv("DMLUPLOAD_FAULTS");
    static const std::string faults = "," + std::string(set ? set : "") + ",";
    return faults.find("," + std::string(name) + ",") != std::string::npos;
}

static std::string Str(UINT64 v) { return std::to_string((unsigned long long)v); }
static std::string Hex(HRESULT hr) {
    char text[16];
    snprintf(text, sizeof text, "0x%08x", (unsigned)hr);
    return text;
}
static UINT64 Align(UINT64 v, UINT64 a) { return (v + a - 1) / a * a; }
static std::string LevelText(UINT level) { return Str(level >> 12) + "." + Str((level >> 8) & 0xF); }

// s in codePage as UTF-16; empty when s is not valid in it (flags MB_ERR_INVALID_CHARS).
static std::wstring Widen(const std::string& s, UINT codePage, DWORD flags = 0) {
    std::wstring w((size_t)MultiByteToWideChar(codePage, flags, s.data(), (int)s.size(), nullptr, 0), L'\0');
    MultiByteToWideChar(codePage, flags, s.data(), (int)s.size(), &w[0], (int)w.size());
    return w;
}

static const char* const kTypeNames[] = {"UNKNOWN", "FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32",
                                         "INT16", "INT8", "FLOAT64", "UINT64", "INT64", "UINT4", "INT4"};
static const UINT kTypeBits[] = {0, 32, 16, 32, 16, 8, 32, 16, 8, 64, 64, 64, 4, 4};
static const UINT kTypeCount = 14;

// ------------------------------------------------------------------------------------------ the binding list

// One DML_BUFFER_TENSOR_DESC as the list spells it. It owns the Sizes and Strides arrays that Get() points into:
// keep it alive, and in place, while DirectML looks at the struct Get() returned.
struct Desc {
    DML_TENSOR_DATA_TYPE type = DML_TENSOR_DATA_TYPE_UNKNOWN;
    UINT flags = 0, dims = 0, sizes[8] = {}, strides[8] = {};
    bool hasStrides = false;
    UINT64 total = 0;
    UINT alignment = 0;
    DML_BUFFER_TENSOR_DESC Get() const {
        return {type, (DML_TENSOR_FLAGS)flags, dims, sizes, hasStrides ? strides : nullptr, total, alignment};
    }
};

static const UINT64 kMaxElements = 0xFFFFFFFFull;  // what one DirectML tensor holds at most

// The number of elements of these sizes, multiplied with a check: false when it is above kMaxElements (eight UINT
// sizes can wrap 64 bits: 2^20 x 2^20 x 2^24 is 0 there).
static bool ElementCount(const Desc& shape, UINT64& n) {
    n = 1;
    for (UINT i = 0; i < shape.dims; ++i) {
        if (shape.sizes[i] && n > kMaxElements / shape.sizes[i]) return false;
        n *= shape.sizes[i];
    }
    return true;
}

// A packed tensor of these sizes; TotalTensorSizeInBytes as DMLCalcBufferTensorSize has it: bytes rounded up to 4.
// Callers refuse sizes of more than kMaxElements first (RefuseDesc, CheckOptions); were such sizes to come here,
// the size is UINT64's maximum, which no binding can hold, never a wrapped small number.
static Desc Packed(DML_TENSOR_DATA_TYPE type, const Desc& shape) {
    Desc d;
    d.type = type;
    d.dims = shape.dims;
    std::copy(shape.sizes, shape.sizes + 8, d.sizes);
    UINT64 n = 0;
    d.total = ElementCount(shape, n) ? Align((n * kTypeBits[type] + 7) / 8, 4) : UINT64(-1);
    return d;
}
static Desc Packed(DML_TENSOR_DATA_TYPE type, std::initializer_list<UINT> sizes) {
    Desc shape;
    shape.dims = (UINT)sizes.size();
    std::copy(sizes.begin(), sizes.end(), shape.sizes);
    return Packed(type, shape);
}

// One value broadcast to these sizes (every stride 0): DEQUANTIZE's scale and zero point for a plain 4-bit read.
static Desc Broadcast(DML_TENSOR_DATA_TYPE type, const Desc& shape) {
    Desc d = Packed(type, shape);
    d.hasStrides = true;  // (all 0)
    d.total = 4;
    return d;
}

struct Binding {       // a tensor line, one part line, or one consumer line (its tensor's BUFFER and OFFSET)
    std::string name;  // as printed: the KEY still percent-encoded, RECORD/FORM/ROLE, or KEY#INDEX
    UINT buffer = 0;
    UINT64 offset = 0;
    Desc desc;
    std::string readsOn = "gpu";  // a tensor's READS_ON: gpu, cpu or none
};
struct Consumer {  // a consumer line: the desc one DirectML operator binds its tensor's bytes at
    size_t tensor = 0;        // its tensor line, in BindingList::tensors
    UINT index = 0;           // INDEX: its position among the manifest's consumers of the entry
    bool undecided = false;   // DESC "-": the model leaves its sizes undecided (the manifest's layout note)
    Binding binding;          // (undecided: only the name is set)
};
struct QuantForm {  // the three part lines of one record and form
    std::string record, form;
    Binding parts[3];  // weight, scales, zero_points
    std::string op;    // the operator its quantized line names: DEQUANTIZE or ELEMENT_WISE_DEQUANTIZE_LINEAR
};
struct BufferLine {
    std::string encoded;  // FILE as the list spells it
    std::wstring name;    // FILE decoded: a plain file name in the folder of the buffer files
    UINT64 size = 0;
    bool upload = true;  // UPLOAD gpu; cpu: the values of constants read on the CPU, never uploaded
    HANDLE file = INVALID_HANDLE_VALUE;  // open from the check of the list to the upload: the file that was checked
};
struct BindingList {
    UINT target = 0;
    std::vector<BufferLine> buffers;
    std::vector<Binding> tensors;
    std::vector<Consumer> consumers;  // in list order: each after its tensor
    std::vector<QuantForm> forms;
    std::map<std::string, std::string> operators;  // RECORD -> OPERATOR, from the quantized lines
};

static std::string g_listPath;  // where the list being read is, for messages
static size_t g_lineNumber = 0;

[[noreturn]] static void Malformed(const std::string& what) {
    BadInput(g_listPath + " line " + Str(g_lineNumber) + ": " + what);
}

static UINT64 Number(const std::string& field, UINT64 max, const std::string& what) {
    UINT64 v = 0;
    for (char c : field) {
        if (c < '0' || c > '9') Malformed(what + " '" + field + "' is not a decimal number");
        if (v > (UINT64(-1) - (UINT64)(c - '0')) / 10) Malformed(what + " '" + field + "' is too large");
        v = v * 10 + (UINT64)(c - '0');
    }
    if (field.empty()) Malformed(what + " is empty");
    if (v > max) Malformed(what + " " + field + " is above " + Str(max));
    return v;
}

static void Numbers(const std::string& field, UINT count, UINT* out, const char* what) {
    size_t start = 0;
    for (UINT i = 0; i < count; ++i, start = field.find(',', start) + 1) {
        size_t end = field.find(',', start);
        if ((end == std::string::npos) != (i + 1 == count))
            Malformed(std::string(what) + " '" + field + "' does not have DimensionCount (" + Str(count) + ") numbers");
        out[i] = (UINT)Number(field.substr(start, end - start), 0xFFFFFFFFu, what);
    }
}

// Percent-decoding (docs/bindings.md): bytes outside the plain set are written %XX.
static std::string Decoded(const std::string& field, const char* what) {
    auto hex = [](char c) {
        return isdigit((unsigned char)c) ? c - '0' : isxdigit((unsigned char)c) ? (c | 32) - 'a' + 10 : -1;
    };
    std::string out;
    for (size_t i = 0; i < field.size(); ++i) {
        char c = field[i];
        if (c == '%') {
            int high = i + 2 < field.size() ? hex(field[i + 1]) : -1, low = high >= 0 ? hex(field[i + 2]) : -1;
            if (low < 0) Malformed(std::string(what) + " '" + field + "' has a % not followed by two hex digits");
            out += (char)(high * 16 + low);
            i += 2;
        } else if (isalnum((unsigned char)c) || strchr("-._~/:", c)) {
            out += c;
        } else {
            Malformed(std::string(what) + " '" + field + "' has a '" + c + "' that should be percent-encoded");
        }
    }
    if (out.empty() || out.find('\0') != std::string::npos)
        Malformed(std::string(what) + " '" + field + "' is empty or has a NUL");
    return out;
}

// A buffer line's FILE, decoded: a plain file name beside the list, as load_plan takes a manifest's (no folder,
// drive or stream: no / \ or :; no leading dot: not . or ..; nothing else Windows refuses in a name; UTF-8).
static std::wstring PlainFileName(const std::string& field) {
    std::string name = Decoded(field, "FILE");
    bool plain = name.size() <= 255 && name[0] != '.';
    for (unsigned char c : name) plain = plain && c >= 0x20 && !strchr("/\\:*?\"<>|", c);
    if (!plain)
        Malformed("FILE '" + field + "' is not a plain file name: a buffer file is a file beside the list (no " +
                  "folder, '..', drive or stream, no leading '.')");
    std::wstring wide = Widen(name, CP_UTF8, MB_ERR_INVALID_CHARS);
    if (wide.empty()) Malformed("FILE '" + field + "' is not UTF-8");
    return wide;
}

// Where a handle's file or folder really is, every symbolic link and junction resolved (GetFinalPathNameByHandleW),
// without a trailing separator; empty when that cannot be told.
static std::wstring FinalPath(HANDLE h) {
    std::wstring path(512, L'\0');
    DWORD n = GetFinalPathNameByHandleW(h, &path[0], (DWORD)path.size(), FILE_NAME_NORMALIZED);
    if (n >= path.size()) {
        path.resize(n + 1);
        n = GetFinalPathNameByHandleW(h, &path[0], (DWORD)path.size(), FILE_NAME_NORMALIZED);
    }
    path.resize(n < path.size() ? n : 0);
    while (!path.empty() && (path.back() == L'\\' || path.back() == L'/')) path.pop_back();
    return path;
}

// Opens every buffer file in dir and keeps it open for the upload: each must be a regular file that is itself in dir
// (not a symbolic link or junction leading elsewhere, not a folder, device or pipe), of the size
// its line says. Nothing outside dir is read.
static void OpenBufferFiles(BindingList& list, const std::string& dir) {
    std::wstring folder = Widen(dir, CP_ACP);
    HANDLE h = CreateFileW(folder.c_str(), 0, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                           OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, nullptr);
    std::wstring where = h == INVALID_HANDLE_VALUE ? L"" : FinalPath(h);
    if (h != INVALID_HANDLE_VALUE) CloseHandle(h);
    if (where.empty() && !list.buffers.empty())
        BadInput("cannot open " + dir + ", the folder of the buffer files (the list's, or --dir)");
    for (size_t i = 0; i < list.buffers.size(); ++i) {
        BufferLine& b = list.buffers[i];
        std::string what = "buffer " + Str(i) + ": " + b.encoded;
        // FILE_FLAG_OPEN_REPARSE_POINT: a symbolic link is opened itself, and refused below, never followed.
        // FILE_SHARE_DELETE: a conversion that replaces these files while they are read can still remove them (as
        // dmlbridge's own readers allow); the removal is pending until this handle is closed.
        b.file = CreateFileW((folder + L"\\" + b.name).c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE,
                             nullptr, OPEN_EXISTING, FILE_FLAG_OPEN_REPARSE_POINT | FILE_FLAG_SEQUENTIAL_SCAN, nullptr);
        if (b.file == INVALID_HANDLE_VALUE) BadInput(what + ": cannot open it in " + dir);
        BY_HANDLE_FILE_INFORMATION info = {};
        if (!GetFileInformationByHandle(b.file, &info) ||
            (info.dwFileAttributes & (FILE_ATTRIBUTE_DIRECTORY | FILE_ATTRIBUTE_REPARSE_POINT)))
            BadInput(what + " is not a regular file (a symbolic link, junction, folder, device or pipe)");
        // A link the file system does not report as a reparse point (Wine's view of a POSIX symlink) still shows
        // here: the file is not where its name says.
        std::wstring expected = where + L"\\" + b.name, final = FinalPath(b.file);
        if (final.empty() || CompareStringOrdinal(final.c_str(), (int)final.size(), expected.c_str(),
                                                  (int)expected.size(), TRUE) != CSTR_EQUAL)
            BadInput(what + " leads outside " + dir + " (a symbolic link?): a buffer file must be a file of its own "
                     "beside the list");
        // (only now: under Wine, GetFileType reads the file)
        if (GetFileType(b.file) != FILE_TYPE_DISK) BadInput(what + " is not a regular file (a device or pipe)");
        UINT64 size = (UINT64)info.nFileSizeHigh << 32 | info.nFileSizeLow;
        if (size != b.size) BadInput(what + " has " + Str(size) + " bytes, the list says " + Str(b.size));
    }
}

static Desc ParseDesc(const std::vector<std::string>& f, size_t at) {
    Desc d;
    for (UINT t = 1; t < kTypeCount; ++t)
        if (f[at] == kTypeNames[t]) d.type = (DML_TENSOR_DATA_TYPE)t;
    if (d.type == DML_TENSOR_DATA_TYPE_UNKNOWN) Malformed("unknown DataType '" + f[at] + "'");
    d.flags = (UINT)Number(f[at + 1], 0xFFFFFFFFu, "Flags");
    d.dims = (UINT)Number(f[at + 2], 8, "DimensionCount");
    if (d.dims == 0) Malformed("DimensionCount 0: it is 1 to 8");
    Numbers(f[at + 3], d.dims, d.sizes, "Sizes");
    if ((d.hasStrides = f[at + 4] != "-")) Numbers(f[at + 4], d.dims, d.strides, "Strides");
    d.total = Number(f[at + 5], UINT64(-1), "TotalTensorSizeInBytes");
    d.alignment = (UINT)Number(f[at + 6], 0xFFFFFFFFu, "GuaranteedBaseOffsetAlignment");
    return d;
}

// Reads and checks the whole list, and the sizes of its files: whatever is wrong ends the program (exit 2) before
// a GPU is touched.
static BindingList ReadBindingList(const std::string& path, const std::string& dir) {
    g_listPath = path;
    std::string text;
    FILE* file = fopen(path.c_str(), "rb");
    if (!file) BadInput("cannot open the binding list " + path);
    char block[65536];
    for (size_t n; (n = fread(block, 1, sizeof block, file)) > 0;) text.append(block, n);
    fclose(file);
    if (text.empty()) BadInput(path + " is empty: not a binding list");
    BindingList list;
    const char* const roles[] = {"weight", "scales", "zero_points"};
    int role = 0;                // the part line the current record form needs next
    bool bindingsBegun = false;  // buffer lines come first
    std::string previous;        // the kind of the line before (consumer lines follow their tensor's)
    for (size_t start = 0; start < text.size(); start = text.find('\n', start) + 1) {
        ++g_lineNumber;
        size_t end = text.find('\n', start);
        if (end == std::string::npos) Malformed("the last line does not end in \\n");
        std::string line = text.substr(start, end - start);
        for (char c : line)
            if (c == '\r') Malformed("carriage return: lines end in \\n alone");
            else if (c < 0x20 || c > 0x7E) Malformed("byte " + Str((unsigned char)c) + " is not printable ASCII");
        if (g_lineNumber > 1 && line[0] == '#') continue;  // a comment
        std::vector<std::string> f;
        for (size_t at = 0, space = 0; space != std::string::npos; at = space + 1) {
            space = line.find(' ', at);
            f.push_back(line.substr(at, space - at));
            if (f.back().empty()) Malformed(line.empty() ? "empty line" : "fields are separated by exactly one space");
        }
        if (g_lineNumber == 1) {
            // (version 1 lists no UPLOAD, READS_ON or consumer: uploading it all would bind what DirectML never
            // reads; the manifest still has it all, so writing the list again is the way)
            if (f[0] == "dmlbridge-bindings" && f.size() == 2 && f[1] != "2")
                Malformed("binding list version " + f[1] + ": this program reads version 2; write the list again "
                          "with 'dmlbridge bindings PREFIX.json'");
            if (line != "dmlbridge-bindings 2")
                Malformed("not a binding list: the first line must be 'dmlbridge-bindings 2'");
        } else if (list.target == 0) {
            size_t dot = f.size() == 2 && f[0] == "target" ? f[1].find('.') : std::string::npos;
            if (dot == std::string::npos) Malformed("expected 'target MAJOR.MINOR'");
            list.target = (UINT)Number(f[1].substr(0, dot), 15, "target") << 12 |
                          (UINT)Number(f[1].substr(dot + 1), 15, "target") << 8;
            if (list.target < DML_FEATURE_LEVEL_1_0) Malformed("target " + f[1] + " is not a DirectML feature level");
        } else if (role != 0 && f[0] != "part") {
            Malformed("record " + list.forms.back().record + " form " + list.forms.back().form + " lacks its " +
                      roles[role] + " line");
        } else if (f[0] == "buffer") {
            if (f.size() != 5) Malformed("a buffer line is 'buffer INDEX FILE SIZE UPLOAD'");
            if (bindingsBegun) Malformed("buffer lines come before every tensor and part line");
            if (Number(f[1], 0xFFFFFFFFu, "buffer INDEX") != list.buffers.size())
                Malformed("buffer INDEX " + f[1] + ": expected " + Str(list.buffers.size()) + " (they are in order)");
            if (f[4] != "gpu" && f[4] != "cpu") Malformed("UPLOAD '" + f[4] + "': expected gpu or cpu");
            if (f[4] == "gpu" && !list.buffers.empty() && !list.buffers.back().upload)
                Malformed("buffer " + f[1] + " is uploaded (gpu) after one that is not (cpu): the cpu ones come last");
            bool upload = f[4] == "gpu";
            list.buffers.push_back({f[2], PlainFileName(f[2]), Number(f[3], 1ull << 62, "buffer SIZE"), upload});
        } else if (f[0] == "quantized") {
            if (f.size() != 3) Malformed("a quantized line is 'quantized RECORD OPERATOR'");
            Decoded(f[1], "RECORD");
            if (f[2] != "DEQUANTIZE" && f[2] != "ELEMENT_WISE_DEQUANTIZE_LINEAR" && f[2] != "-")
                Malformed("OPERATOR '" + f[2] + "': expected DEQUANTIZE, ELEMENT_WISE_DEQUANTIZE_LINEAR or -");
            if (!list.operators.emplace(f[1], f[2] == "-" ? "DEQUANTIZE" : f[2]).second)
                Malformed("a second quantized line for record " + f[1]);
            bindingsBegun = true;
        } else if (f[0] == "consumer") {
            if (f.size() != 13 && !(f.size() == 7 && f[6] == "-"))
                Malformed("a consumer line is 'consumer KEY INDEX NODE INPUT OPERATOR' and the 7 desc fields, or -");
            if (previous != "tensor" && previous != "consumer")
                Malformed("a consumer line comes right after its tensor line (or another consumer line of it)");
            const Binding& t = list.tensors.back();
            if (f[1] != t.name) Malformed("a consumer line of " + f[1] + " after the tensor line of " + t.name);
            if (t.readsOn != "gpu") Malformed("a consumer line of " + f[1] + ", whose READS_ON is " + t.readsOn +
                                              ": only a tensor read on the GPU has consumers");
            UINT index = (UINT)Number(f[2], 0xFFFFFFFFu, "consumer INDEX");
            if (previous == "consumer" && index <= list.consumers.back().index)
                Malformed("consumer INDEX " + f[2] + ": the consumer lines of a tensor are in increasing INDEX");
            Decoded(f[3], "NODE");
            Number(f[4], 0xFFFFFFFFu, "consumer INPUT");
            for (char c : f[5])
                if (!(isupper((unsigned char)c) || isdigit((unsigned char)c) || c == '_') && f[5] != "-")
                    Malformed("OPERATOR '" + f[5] + "': a DML_OPERATOR_TYPE name without its prefix, or -");
            Consumer c;
            c.tensor = list.tensors.size() - 1;
            c.index = index;
            c.undecided = f.size() == 7;
            c.binding.name = f[1] + "#" + Str(index);
            c.binding.buffer = t.buffer;
            c.binding.offset = t.offset;
            if (!c.undecided) c.binding.desc = ParseDesc(f, 6);
            list.consumers.push_back(c);
        } else if (f[0] == "tensor" || f[0] == "part") {
            bool part = f[0] == "part";
            if (f.size() != (part ? 14u : 12u))
                Malformed(part ? "a part line is 'part RECORD FORM ROLE KEY BUFFER OFFSET' and the 7 desc fields"
                               : "a tensor line is 'tensor KEY BUFFER OFFSET', the 7 desc fields and READS_ON");
            bindingsBegun = true;
            Binding b;
            b.name = f[1];
            if (part) {
                Decoded(f[1], "RECORD");
                if (f[2] != "split" && f[2] != "blocked") Malformed("FORM '" + f[2] + "': expected split or blocked");
                if (f[3] != roles[role])
                    Malformed("ROLE '" + f[3] + "': expected " + roles[role] + " (weight, scales, zero_points)");
                if (role == 0) {
                    auto op = list.operators.find(f[1]);
                    if (op == list.operators.end()) Malformed("a part of record " + f[1] + " before its quantized line");
                    list.forms.push_back({f[1], f[2], {}, op->second});
                }
                if (f[1] != list.forms.back().record || f[2] != list.forms.back().form)
                    Malformed("a part of " + f[1] + "/" + f[2] + " where " + list.forms.back().record + "/" +
                              list.forms.back().form + " needs its " + roles[role]);
                b.name = f[1] + "/" + f[2] + "/" + f[3];
            }
            size_t at = part ? 4 : 1;  // KEY BUFFER OFFSET DESC...
            Decoded(f[at], "KEY");
            b.buffer = (UINT)Number(f[at + 1], 0xFFFFFFFFu, "BUFFER");
            b.offset = Number(f[at + 2], UINT64(-1), "OFFSET");
            b.desc = ParseDesc(f, at + 3);
            if (!part) {
                b.readsOn = f[11];
                if (b.readsOn != "gpu" && b.readsOn != "cpu" && b.readsOn != "none")
                    Malformed("READS_ON '" + b.readsOn + "': expected gpu, cpu or none");
                if (b.buffer < list.buffers.size() && !list.buffers[b.buffer].upload && b.readsOn != "cpu")
                    Malformed("tensor " + f[1] + " is in buffer " + Str(b.buffer) + ", which is not uploaded (cpu), "
                              "but its READS_ON is " + b.readsOn + ": only what is read on the CPU is left there");
            }
            if (part) list.forms.back().parts[role] = b, role = (role + 1) % 3;
            else list.tensors.push_back(b);
        } else {
            Malformed("unknown line '" + f[0] + "': expected buffer, tensor, consumer, quantized, part or a # "
                      "comment");
        }
        previous = f[0];
    }
    if (list.target == 0) Malformed("the list ends before its target line");
    if (role != 0) Malformed("the list ends inside record " + list.forms.back().record + "'s part lines");
    OpenBufferFiles(list, dir);
    return list;
}

// Checked before anything is bound (docs/bindings.md): a binding past its resource, or misaligned, can remove the
// device instead of failing a call. Returns why the binding is refused, or "".
static std::string CheckBinding(const BindingList& list, const Binding& b) {
    if (b.buffer >= list.buffers.size()) return "buffer " + Str(b.buffer) + " does not exist";
    if (!list.buffers[b.buffer].upload) return "buffer " + Str(b.buffer) + " is not uploaded (its UPLOAD is cpu)";
    if (b.offset % DML_MINIMUM_BUFFER_TENSOR_ALIGNMENT) return "offset " + Str(b.offset) + " is not a multiple of 16";
    if (b.desc.alignment && b.offset % b.desc.alignment)
        return "offset " + Str(b.offset) + " is not a multiple of GuaranteedBaseOffsetAlignment " +
               Str(b.desc.alignment);
    UINT64 size = list.buffers[b.buffer].size;
    if (b.desc.total > size || b.offset > size - b.desc.total)
        return "offset " + Str(b.offset) + " + TotalTensorSizeInBytes " + Str(b.desc.total) +
               " is past the end of buffer " + Str(b.buffer) + " (" + Str(size) + " bytes)";
    return "";
}

// ------------------------------------------------------------------------------------------- Direct3D 12 side

struct Scratch {  // a buffer reused from operator to operator, grown when one needs more
    ComPtr<ID3D12Resource> resource;
    UINT64 size = 0;
};

struct Gpu {
    ComPtr<ID3D12Device> device;
    ComPtr<ID3D12CommandQueue> queue;
    ComPtr<ID3D12CommandAllocator> allocator;
    ComPtr<ID3D12GraphicsCommandList> list;  // one list, reset after each submission
    ComPtr<ID3D12Fence> fence;
    UINT64 fenceValue = 0;
    HANDLE fenceEvent = nullptr;
    ComPtr<IDMLDevice> dml;
    ComPtr<IDMLCommandRecorder> recorder;
    DML_FEATURE_LEVEL level = DML_FEATURE_LEVEL_1_0;
    // Every submission is waited for, so these are free for the next step as soon as one returns.
    ComPtr<ID3D12DescriptorHeap> heap;
    UINT heapSize = 0;
    Scratch upload, readback, pattern, temporary, persistent, intermediate, output;
};

static HRESULT CreateBuffer(Gpu& g, UINT64 size, D3D12_HEAP_TYPE heap, D3D12_RESOURCE_STATES state,
                            ComPtr<ID3D12Resource>& out) {
    D3D12_HEAP_PROPERTIES props = {};
    props.Type = heap;
    D3D12_RESOURCE_DESC desc = {};
    desc.Dimension = D3D12_RESOURCE_DIMENSION_BUFFER;
    desc.Width = std::max<UINT64>(Align(size, 16), 16);
    desc.Height = desc.DepthOrArraySize = desc.MipLevels = 1;
    desc.SampleDesc.Count = 1;
    desc.Layout = D3D12_TEXTURE_LAYOUT_ROW_MAJOR;
    // DirectML binds every buffer as an unordered-access view.
    if (heap == D3D12_HEAP_TYPE_DEFAULT) desc.Flags = D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS;
    out.Reset();
    return g.device->CreateCommittedResource(&props, D3D12_HEAP_FLAG_NONE, &desc, state, nullptr, IID_PPV_ARGS(&out));
}

static HRESULT Grow(Gpu& g, Scratch& s, UINT64 size, D3D12_HEAP_TYPE heap) {
    if (size <= s.size) return S_OK;
    size = std::max(Align(size, 16), s.size * 2);  // geometric: a run of growing tensors reallocates rarely
    s.size = 0;
    HRESULT hr = CreateBuffer(g, size, heap, heap == D3D12_HEAP_TYPE_UPLOAD ? D3D12_RESOURCE_STATE_GENERIC_READ
                                             : heap == D3D12_HEAP_TYPE_READBACK ? D3D12_RESOURCE_STATE_COPY_DEST
                                             : D3D12_RESOURCE_STATE_UNORDERED_ACCESS, s.resource);
    if (SUCCEEDED(hr)) s.size = size;
    return hr;
}

static void Transition(Gpu& g, ID3D12Resource* r, D3D12_RESOURCE_STATES before, D3D12_RESOURCE_STATES after) {
    D3D12_RESOURCE_BARRIER b = {};
    b.Type = D3D12_RESOURCE_BARRIER_TYPE_TRANSITION;
    b.Transition = {r, D3D12_RESOURCE_BARRIER_ALL_SUBRESOURCES, before, after};
    g.list->ResourceBarrier(1, &b);
}

// One dispatch's writes are done before the next one reads them.
static void UavBarrier(Gpu& g) {
    D3D12_RESOURCE_BARRIER b = {};
    b.Type = D3D12_RESOURCE_BARRIER_TYPE_UAV;
    g.list->ResourceBarrier(1, &b);
}

// Submits the recorded commands and waits for them. A removed device ends the program (exit 4): nothing after it
// could be trusted, and the caller starts a new process.
static HRESULT ExecuteAndWait(Gpu& g) {
    HRESULT hr = g.list->Close();
    if (SUCCEEDED(hr)) {
        ID3D12CommandList* lists[] = {g.list.Get()};
        g.queue->ExecuteCommandLists(1, lists);
        hr = g.queue->Signal(g.fence.Get(), ++g.fenceValue);
        if (SUCCEEDED(hr)) hr = g.fence->SetEventOnCompletion(g.fenceValue, g.fenceEvent);
        while (SUCCEEDED(hr) && g.fence->GetCompletedValue() < g.fenceValue)
            if (WaitForSingleObject(g.fenceEvent, 1000) != WAIT_OBJECT_0 && g.device->GetDeviceRemovedReason() != S_OK)
                break;  // (a lost device may never signal)
    }
    HRESULT removed = g.device->GetDeviceRemovedReason();
    if (removed == S_OK) removed = g.dml->GetDeviceRemovedReason();  // DirectML loses its device on its own, too
    if (removed != S_OK) {
        Say("device removed 0x%08x", (unsigned)removed);
        exit(4);
    }
    HRESULT reset = g.allocator->Reset();
    if (SUCCEEDED(reset)) reset = g.list->Reset(g.allocator.Get(), nullptr);
    if (FAILED(reset)) {
        Say("device FAILED resetting the command list 0x%08x", (unsigned)reset);
        exit(1);
    }
    return hr;
}

// Drops what a failed step recorded: nothing stale may run with the next submission.
static void Discard(Gpu& g) {
    g.list->Close();
    g.allocator->Reset();
    g.list->Reset(g.allocator.Get(), nullptr);
}

// Fills a new default buffer (COPY_DEST state) chunk by chunk through the one upload buffer, so that large files
// need no large upload heap, and leaves it in UNORDERED_ACCESS, the state DirectML reads buffers in.
// read(p, n) writes the next n source bytes at p.
template <class Source>
static HRESULT Upload(Gpu& g, ID3D12Resource* dst, UINT64 size, Source read) {
    HRESULT hr = Grow(g, g.upload, std::min(size, kChunk), D3D12_HEAP_TYPE_UPLOAD);
    for (UINT64 done = 0; SUCCEEDED(hr);) {
        if (UINT64 n = std::min(kChunk, size - done)) {
            void* p = nullptr;
            D3D12_RANGE none = {0, 0};  // the CPU reads nothing
            if (FAILED(hr = g.upload.resource->Map(0, &none, &p))) break;
            read(p, (size_t)n);
            g.upload.resource->Unmap(0, nullptr);
            g.list->CopyBufferRegion(dst, done, g.upload.resource.Get(), 0, n);
            done += n;
        }
        if (done == size) Transition(g, dst, D3D12_RESOURCE_STATE_COPY_DEST, D3D12_RESOURCE_STATE_UNORDERED_ACCESS);
        hr = ExecuteAndWait(g);  // and the upload buffer is free for the next chunk
        if (done == size) break;
    }
    return hr;
}

// Copies the first size bytes of a default buffer (UNORDERED_ACCESS state) to the CPU, chunk by chunk.
template <class Sink>
static HRESULT ReadBack(Gpu& g, ID3D12Resource* src, UINT64 size, Sink sink) {
    HRESULT hr = Grow(g, g.readback, std::min(size, kChunk), D3D12_HEAP_TYPE_READBACK);
    for (UINT64 done = 0, n; SUCCEEDED(hr) && done < size; done += n) {
        n = std::min(kChunk, size - done);
        Transition(g, src, D3D12_RESOURCE_STATE_UNORDERED_ACCESS, D3D12_RESOURCE_STATE_COPY_SOURCE);
        g.list->CopyBufferRegion(g.readback.resource.Get(), 0, src, done, n);
        Transition(g, src, D3D12_RESOURCE_STATE_COPY_SOURCE, D3D12_RESOURCE_STATE_UNORDERED_ACCESS);
        void* p = nullptr;
        D3D12_RANGE range = {0, (SIZE_T)n}, none = {0, 0};
        if (FAILED(hr = ExecuteAndWait(g)) || FAILED(hr = g.readback.resource->Map(0, &range, &p))) break;
        sink((const unsigned char*)p, (size_t)n);
        g.readback.resource->Unmap(0, &none);
    }
    return hr;
}

// Records copies of 0xA5 over [0, size) of a default buffer: an operator that silently writes nothing then shows.
// Without the pattern buffer nothing is recorded and the operator must not run: its output would not show it.
static HRESULT RecordFill(Gpu& g, ID3D12Resource* dst, UINT64 size) {
    if (!g.pattern.size) {
        void* p = nullptr;
        D3D12_RANGE none = {0, 0};
        HRESULT hr = Fault("no-pattern") ? E_OUTOFMEMORY : Grow(g, g.pattern, kPatternSize, D3D12_HEAP_TYPE_UPLOAD);
        if (SUCCEEDED(hr)) hr = g.pattern.resource->Map(0, &none, &p);
        if (FAILED(hr)) return g.pattern.size = 0, hr;
        memset(p, 0xA5, (size_t)g.pattern.size);
        g.pattern.resource->Unmap(0, nullptr);
    }
    Transition(g, dst, D3D12_RESOURCE_STATE_UNORDERED_ACCESS, D3D12_RESOURCE_STATE_COPY_DEST);
    for (UINT64 done = 0; done < size; done += g.pattern.size)
        g.list->CopyBufferRegion(dst, done, g.pattern.resource.Get(), 0, std::min(g.pattern.size, size - done));
    Transition(g, dst, D3D12_RESOURCE_STATE_COPY_DEST, D3D12_RESOURCE_STATE_UNORDERED_ACCESS);
    return S_OK;
}

// ---------------------------------------------------------------------------------------------- DirectML side

static DML_BINDING_PROPERTIES BindingProperties(IDMLDispatchable* d) {
#if defined(_MSC_VER)
    return d->GetBindingProperties();
#else
    // GCC returns a struct from a C++ virtual method differently from MSVC, whose ABI DirectML.dll has: call vtable
    // slot 8 (IUnknown 3, IDMLObject 4, IDMLDeviceChild 1) with the hidden return pointer MSVC passes after this.
    typedef DML_BINDING_PROPERTIES*(STDMETHODCALLTYPE * Fn)(IDMLDispatchable*, DML_BINDING_PROPERTIES*);
    DML_BINDING_PROPERTIES r = {};
    ((Fn)(*(void***)d)[8])(d, &r);
    return r;
#endif
}

// A DML_BUFFER_BINDING (without a resource: an optional input left out), and whether its tensor has
// DML_TENSOR_FLAG_OWNED_BY_DML (then it is bound at initialization instead of execution).
struct Bind {
    ID3D12Resource* resource = nullptr;
    UINT64 offset = 0, size = 0;
    bool owned = false;
};
struct Step {  // one compiled operator of a dispatch, with its buffers
    ComPtr<IDMLCompiledOperator> op;
    std::vector<Bind> inputs;  // one per operator input, optional ones included: DirectML removes its device otherwise
    Bind output;
};

// Initializes the steps' operators and executes them in order, in one submission: each step may read what the one
// before wrote (GEMM after DEQUANTIZE). Each binding table gets its own range of the one descriptor heap: all of
// them are recorded before the GPU runs any.
static HRESULT Dispatch(Gpu& g, std::vector<Step>& steps) {
    std::vector<IDMLCompiledOperator*> ops;
    for (Step& s : steps) ops.push_back(s.op.Get());
    ComPtr<IDMLOperatorInitializer> init;
    HRESULT hr = g.dml->CreateOperatorInitializer((UINT)ops.size(), ops.data(), IID_PPV_ARGS(&init));
    if (FAILED(hr)) return hr;

    std::vector<IDMLDispatchable*> what{init.Get()};  // [0] the initializer, [1...] the steps
    what.insert(what.end(), ops.begin(), ops.end());
    std::vector<DML_BINDING_PROPERTIES> props;
    std::vector<DML_BUFFER_BINDING> persist(1);  // [i]: dispatch i's persistent resource; one each, all live at once
    UINT descriptors = 0;
    UINT64 temporary = 0, persistent = 0;
    for (IDMLDispatchable* d : what) {
        props.push_back(BindingProperties(d));
        descriptors += std::max(props.back().RequiredDescriptorCount, 1u);
        temporary = std::max(temporary, props.back().TemporaryResourceSize);
        if (d == init.Get()) continue;
        persist.push_back({nullptr, persistent, props.back().PersistentResourceSize});
        persistent += Align(props.back().PersistentResourceSize, DML_PERSISTENT_BUFFER_ALIGNMENT);
    }
    if (descriptors > g.heapSize) {
        D3D12_DESCRIPTOR_HEAP_DESC hd = {D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV, std::max(descriptors, g.heapSize * 2),
                                         D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE, 0};
        g.heapSize = 0;
        if (FAILED(hr = g.device->CreateDescriptorHeap(&hd, IID_PPV_ARGS(g.heap.ReleaseAndGetAddressOf())))) return hr;
        g.heapSize = hd.NumDescriptors;
    }
    if (FAILED(hr = Grow(g, g.temporary, temporary, D3D12_HEAP_TYPE_DEFAULT))) return hr;
    if (FAILED(hr = Grow(g, g.persistent, persistent, D3D12_HEAP_TYPE_DEFAULT))) return hr;
    for (DML_BUFFER_BINDING& p : persist) p.Buffer = g.persistent.resource.Get();

    ID3D12DescriptorHeap* heaps[] = {g.heap.Get()};
    g.list->SetDescriptorHeaps(1, heaps);
    UINT increment = g.device->GetDescriptorHandleIncrementSize(D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV);
    D3D12_CPU_DESCRIPTOR_HANDLE cpu = g.heap->GetCPUDescriptorHandleForHeapStart();
    D3D12_GPU_DESCRIPTOR_HANDLE gpu = g.heap->GetGPUDescriptorHandleForHeapStart();
    auto buffer = [](const DML_BUFFER_BINDING* b) { return DML_BINDING_DESC{DML_BINDING_TYPE_BUFFER, b}; };
    const DML_BINDING_DESC none = {DML_BINDING_TYPE_NONE, nullptr};
    DML_BUFFER_BINDING temp = {g.temporary.resource.Get(), 0, temporary};
    DML_BINDING_DESC tempDesc = buffer(&temp);
    std::vector<ComPtr<IDMLBindingTable>> tables(what.size());  // alive until the GPU is done
    // Initialization binds each operator's persistent resource (as the initializer's outputs) and its
    // OWNED_BY_DML inputs; execution binds the other inputs and the output.
    std::vector<std::vector<DML_BUFFER_BINDING>> owned(steps.size()), inputs(steps.size());
    std::vector<DML_BUFFER_ARRAY_BINDING> ownedArrays(steps.size());
    std::vector<DML_BINDING_DESC> initIn, initOut;
    bool anyOwned = false;
    for (size_t s = 0; s < steps.size(); ++s) {
        for (const Bind& b : steps[s].inputs) {
            owned[s].push_back(b.owned ? DML_BUFFER_BINDING{b.resource, b.offset, b.size} : DML_BUFFER_BINDING{});
            inputs[s].push_back(!b.owned ? DML_BUFFER_BINDING{b.resource, b.offset, b.size} : DML_BUFFER_BINDING{});
            anyOwned |= b.owned;
        }
        ownedArrays[s] = {(UINT)owned[s].size(), owned[s].data()};
        initIn.push_back({DML_BINDING_TYPE_BUFFER_ARRAY, &ownedArrays[s]});
        initOut.push_back(persist[s + 1].SizeInBytes ? buffer(&persist[s + 1]) : none);
    }
    for (size_t i = 0; i < what.size(); ++i) {
        DML_BINDING_TABLE_DESC td = {what[i], cpu, gpu, std::max(props[i].RequiredDescriptorCount, 1u)};
        cpu.ptr += (SIZE_T)td.SizeInDescriptors * increment;
        gpu.ptr += (UINT64)td.SizeInDescriptors * increment;
        if (FAILED(hr = g.dml->CreateBindingTable(&td, IID_PPV_ARGS(&tables[i])))) return hr;
        IDMLBindingTable* t = tables[i].Get();
        if (i == 0) {
            if (anyOwned) t->BindInputs((UINT)initIn.size(), initIn.data());
            t->BindOutputs((UINT)initOut.size(), initOut.data());
        } else {
            std::vector<DML_BINDING_DESC> in;
            for (const DML_BUFFER_BINDING& b : inputs[i - 1]) in.push_back(b.Buffer ? buffer(&b) : none);
            const Bind& o = steps[i - 1].output;
            DML_BUFFER_BINDING out = {o.resource, o.offset, o.size};
            DML_BINDING_DESC outDesc = buffer(&out), persistDesc = buffer(&persist[i]);
            t->BindInputs((UINT)in.size(), in.data());
            t->BindOutputs(1, &outDesc);
            if (persist[i].SizeInBytes) t->BindPersistentResource(&persistDesc);
        }
        if (props[i].TemporaryResourceSize) t->BindTemporaryResource(&tempDesc);
        if (!(Fault("skip-first-step") && steps.size() > 1 && i == 1))  // (an operator that writes nothing)
            g.recorder->RecordDispatch(g.list.Get(), what[i], t);
        UavBarrier(g);
    }
    return ExecuteAndWait(g);
}

// CreateOperator is where DirectML validates the descs; without `compiled` only that is done (--probe-sizes).
static HRESULT MakeOperator(Gpu& g, const DML_OPERATOR_DESC& desc, ComPtr<IDMLCompiledOperator>* compiled) {
    ComPtr<IDMLOperator> op;
    HRESULT hr = g.dml->CreateOperator(&desc, IID_PPV_ARGS(&op));
    if (SUCCEEDED(hr) && compiled)
        hr = g.dml->CompileOperator(op.Get(), DML_EXECUTION_FLAG_NONE, IID_PPV_ARGS(&*compiled));
    return hr;
}

// How a tensor of each type is read into an exact output: FLOAT16 and the 8- and 16-bit integers fit FLOAT32
// exactly (and FLOAT16 outputs round toward zero on some stacks); CAST takes no 4-bit types, DEQUANTIZE does.
struct ReadPlan {
    const char* name;
    DML_OPERATOR_TYPE op;
    DML_TENSOR_DATA_TYPE out;
};
static ReadPlan ReadPlanFor(DML_TENSOR_DATA_TYPE t) {
    switch (t) {
    case DML_TENSOR_DATA_TYPE_FLOAT32: case DML_TENSOR_DATA_TYPE_FLOAT64: case DML_TENSOR_DATA_TYPE_UINT32:
    case DML_TENSOR_DATA_TYPE_INT32: case DML_TENSOR_DATA_TYPE_UINT64: case DML_TENSOR_DATA_TYPE_INT64:
        return {"IDENTITY", DML_OPERATOR_ELEMENT_WISE_IDENTITY, t};
    case DML_TENSOR_DATA_TYPE_UINT4: case DML_TENSOR_DATA_TYPE_INT4:
        return {"DEQUANTIZE", DML_OPERATOR_DEQUANTIZE, DML_TENSOR_DATA_TYPE_FLOAT32};
    default:
        return {"CAST", DML_OPERATOR_CAST, DML_TENSOR_DATA_TYPE_FLOAT32};
    }
}

// DEQUANTIZE, SCALE_ZERO_POINT: output packed, the input's sizes, in outType.
static HRESULT CreateDequantize(Gpu& g, const Desc& input, const Desc& scale, const Desc& zeroPoint,
                                DML_TENSOR_DATA_TYPE outType, ComPtr<IDMLCompiledOperator>* compiled) {
    Desc output = Packed(outType, input);
    DML_BUFFER_TENSOR_DESC in = input.Get(), s = scale.Get(), z = zeroPoint.Get(), out = output.Get();
    DML_TENSOR_DESC inT = {DML_TENSOR_TYPE_BUFFER, &in}, outT = {DML_TENSOR_TYPE_BUFFER, &out};
    DML_TENSOR_DESC quant[2] = {{DML_TENSOR_TYPE_BUFFER, &s}, {DML_TENSOR_TYPE_BUFFER, &z}};
    DML_DEQUANTIZE_OPERATOR_DESC dequantize = {&inT, DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT, 2, quant, &outT};
    return MakeOperator(g, {DML_OPERATOR_DEQUANTIZE, &dequantize}, compiled);
}

// ELEMENT_WISE_DEQUANTIZE_LINEAR (below feature level 6.3, no 4-bit types): input, scale and zero point of one
// set of sizes (the split form), output packed in outType.
static HRESULT CreateDequantizeLinear(Gpu& g, const Desc& input, const Desc& scale, const Desc& zeroPoint,
                                      DML_TENSOR_DATA_TYPE outType, ComPtr<IDMLCompiledOperator>* compiled) {
    Desc output = Packed(outType, input);
    DML_BUFFER_TENSOR_DESC in = input.Get(), s = scale.Get(), z = zeroPoint.Get(), out = output.Get();
    DML_TENSOR_DESC inT = {DML_TENSOR_TYPE_BUFFER, &in}, sT = {DML_TENSOR_TYPE_BUFFER, &s},
                    zT = {DML_TENSOR_TYPE_BUFFER, &z}, outT = {DML_TENSOR_TYPE_BUFFER, &out};
    DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC dequantize = {&inT, &sT, &zT, &outT};
    return MakeOperator(g, {DML_OPERATOR_ELEMENT_WISE_DEQUANTIZE_LINEAR, &dequantize}, compiled);
}

static HRESULT CreateRead(Gpu& g, const Desc& input, ComPtr<IDMLCompiledOperator>* compiled) {
    ReadPlan plan = ReadPlanFor(input.type);
    if (plan.op == DML_OPERATOR_DEQUANTIZE)  // scale 1.0, zero point 0
        return CreateDequantize(g, input, Broadcast(DML_TENSOR_DATA_TYPE_FLOAT32, input), Broadcast(input.type, input),
                                plan.out, compiled);
    Desc output = Packed(plan.out, input);
    DML_BUFFER_TENSOR_DESC in = input.Get(), out = output.Get();
    DML_TENSOR_DESC inT = {DML_TENSOR_TYPE_BUFFER, &in}, outT = {DML_TENSOR_TYPE_BUFFER, &out};
    DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC identity = {&inT, &outT, nullptr};
    DML_CAST_OPERATOR_DESC cast = {&inT, &outT};
    DML_OPERATOR_DESC desc = {plan.op, &identity};
    if (plan.op == DML_OPERATOR_CAST) desc.Desc = &cast;
    return MakeOperator(g, desc, compiled);
}

// ------------------------------------------------------------------------------------------------ the run

struct Gemm {  // one --gemm RECORD=A.bin
    std::string record, file;
    const QuantForm* form = nullptr;  // the record's blocked form
    UINT m = 0, n = 0, k = 0;
};

struct Run {
    Gpu g;
    BindingList list;
    std::vector<ComPtr<ID3D12Resource>> buffers;  // one default buffer per buffer line
    ComPtr<ID3D12Resource> constants;  // scale 1.0 at 0 and zero point 0 at 16 for 4-bit reads; the self-test's data
    FILE* dump = nullptr;
    UINT64 dumped = 0;
    unsigned executed = 0, refused = 0, bindingRefused = 0, descRefused = 0, onCpu = 0, undecided = 0;
};

static Bind BindingOf(Run& r, const Binding& b) {
    return {r.buffers[b.buffer].Get(), b.offset, b.desc.total, (b.desc.flags & DML_TENSOR_FLAG_OWNED_BY_DML) != 0};
}

// The "flush" fault: float values as a GPU that flushes subnormals to zero and keeps no NaN payload may write them
// (Direct3D's float rules allow both): subnormals become a zero of their sign, NaNs the quiet NaN of their sign.
static void FlushFloats(DML_TENSOR_DATA_TYPE type, unsigned char* p, size_t n) {
    UINT bits = type == DML_TENSOR_DATA_TYPE_FLOAT16 ? 16 : type == DML_TENSOR_DATA_TYPE_FLOAT32 ? 32
              : type == DML_TENSOR_DATA_TYPE_FLOAT64 ? 64 : 0;
    if (!bits) return;
    UINT exponentBits = bits == 16 ? 5 : bits == 32 ? 8 : 11, size = bits / 8;
    UINT64 sign = 1ull << (bits - 1), mantissa = (1ull << (bits - 1 - exponentBits)) - 1;
    UINT64 exponent = (sign - 1) & ~mantissa, quiet = exponent | (mantissa + 1) >> 1;
    for (size_t i = 0; i + size <= n; i += size) {
        UINT64 v = 0;
        memcpy(&v, p + i, size);
        if ((v & exponent) == 0 && (v & mantissa)) v &= sign;
        else if ((v & exponent) == exponent && (v & mantissa)) v = (v & sign) | quiet;
        memcpy(p + i, &v, size);
    }
}

// Runs the steps, the last one writing the output scratch (pre-filled with 0xA5) in outType, and reads that back into
// capture or else appends it to the dump (dumpAt: where, or -1 without a dump).
static HRESULT Execute(Run& r, std::vector<Step>& steps, DML_TENSOR_DATA_TYPE outType, UINT64 outBytes,
                       long long& dumpAt, std::vector<unsigned char>* capture = nullptr) {
    dumpAt = -1;
    HRESULT hr = Grow(r.g, r.g.output, outBytes, D3D12_HEAP_TYPE_DEFAULT);
    if (SUCCEEDED(hr)) {
        steps.back().output = {r.g.output.resource.Get(), 0, outBytes, false};
        hr = RecordFill(r.g, r.g.output.resource.Get(), outBytes);
    }
    if (SUCCEEDED(hr)) hr = Dispatch(r.g, steps);
    if (FAILED(hr)) return Discard(r.g), hr;  // (nothing recorded for it may run with the next submission)
    UINT64 at = r.dumped;
    std::vector<unsigned char> flushed;
    hr = ReadBack(r.g, r.g.output.resource.Get(), outBytes, [&](const unsigned char* p, size_t n) {
        if (Fault("flush")) {
            flushed.assign(p, p + n);
            FlushFloats(outType, flushed.data(), n);
            p = flushed.data();
        }
        if (capture) capture->insert(capture->end(), p, p + n);
        else if (r.dump && fwrite(p, 1, n, r.dump) != n) BadInput("cannot write the dump file");
        if (!capture && r.dump) r.dumped += n;
    });
    if (SUCCEEDED(hr) && r.dump && !capture) dumpAt = (long long)at;
    return hr;
}

// The line each operator run ends with, counted.
static void Report(Run& r, const char* what, const std::string& name, const char* op, HRESULT hr,
                   DML_TENSOR_DATA_TYPE out, UINT64 bytes, long long dumpAt) {
    Say("%s %s %s 0x%08x %s %llu %lld", what, name.c_str(), op, (unsigned)hr, kTypeNames[out],
        FAILED(hr) ? 0ull : (unsigned long long)bytes, FAILED(hr) ? -1ll : dumpAt);
    ++(SUCCEEDED(hr) ? r.executed : r.refused);
}

// A tensor of more elements than DirectML's tensors hold has no packed output to read it into: refused before
// DirectML sees it, with the reason.
static bool RefuseDesc(Run& r, const char* what, const std::string& name, const char* op, DML_TENSOR_DATA_TYPE out,
                       const Desc& input) {
    UINT64 n;
    if (ElementCount(input, n)) return false;
    std::string sizes;
    for (UINT i = 0; i < input.dims; ++i) sizes += (i ? "," : "") + Str(input.sizes[i]);
    Say("%s %s %s refused-desc %s 0 -1 Sizes %s hold more than the 2^32 - 1 elements of a DirectML tensor", what,
        name.c_str(), op, kTypeNames[out], sizes.c_str());
    ++r.descRefused;
    return true;
}

static bool RefuseBinding(Run& r, const char* what, const std::string& name, const char* op, DML_TENSOR_DATA_TYPE out,
                          std::initializer_list<const Binding*> bindings) {
    for (const Binding* b : bindings) {
        std::string why = CheckBinding(r.list, *b);
        if (why.empty()) continue;
        Say("%s %s %s refused-binding %s 0 -1 %s", what, name.c_str(), op, kTypeNames[out], why.c_str());
        ++r.bindingRefused;
        return true;
    }
    return false;
}

// One tensor through DirectML: its own desc, bound at its own offset in its uploaded buffer, read into a packed
// output of an exact type.
//
// A FLOAT32 or FLOAT64 tensor is read twice: through its own desc, where Direct3D's float rules let a GPU flush
// subnormals to zero and drop NaN payloads, and through the same desc as UINT32 or UINT64 over the same bytes (the
// "bits" line), a plain copy that gives back every bit on every GPU.
//
// what: "read" for a tensor or part line; "consumer" for a consumer line, its tensor's bytes through the desc one
// operator binds them at (broadcast with strides of 0, say): that DirectML takes the desc and reads through it.
static void ReadTensor(Run& r, const Binding& b, const char* what = "read") {
    ReadPlan plan = ReadPlanFor(b.desc.type);
    if (RefuseBinding(r, what, b.name, plan.name, plan.out, {&b})) return;
    if (RefuseDesc(r, what, b.name, plan.name, plan.out, b.desc)) return;
    bool consumer = strcmp(what, "consumer") == 0;
    DML_TENSOR_DATA_TYPE bits = consumer ? DML_TENSOR_DATA_TYPE_UNKNOWN  // (its tensor's bits read covers them)
                                : b.desc.type == DML_TENSOR_DATA_TYPE_FLOAT32 ? DML_TENSOR_DATA_TYPE_UINT32
                                : b.desc.type == DML_TENSOR_DATA_TYPE_FLOAT64 ? DML_TENSOR_DATA_TYPE_UINT64
                                                                              : DML_TENSOR_DATA_TYPE_UNKNOWN;
    std::vector<Step> steps(1);
    long long dumpAt = -1;
    HRESULT hr = CreateRead(r.g, b.desc, &steps[0].op);
    steps[0].inputs = {BindingOf(r, b)};
    if (plan.op == DML_OPERATOR_DEQUANTIZE)  // the scale 1.0 and zero point 0 all elements broadcast from
        steps[0].inputs.insert(steps[0].inputs.end(), {{r.constants.Get(), 0, 4}, {r.constants.Get(), 16, 4}});
    UINT64 outBytes = Packed(plan.out, b.desc).total;
    if (SUCCEEDED(hr)) hr = Execute(r, steps, plan.out, outBytes, dumpAt);
    Report(r, what, b.name, plan.name, hr, plan.out, outBytes, dumpAt);
    if (bits != DML_TENSOR_DATA_TYPE_UNKNOWN) {
        Desc raw = b.desc;
        raw.type = bits;
        steps[0].op.Reset();
        hr = CreateRead(r.g, raw, &steps[0].op);
        outBytes = Packed(bits, raw).total;
        if (SUCCEEDED(hr)) hr = Execute(r, steps, bits, outBytes, dumpAt);
        Report(r, "bits", b.name, "IDENTITY", hr, bits, outBytes, dumpAt);
    }
}

// The smallest TotalTensorSizeInBytes DirectML accepts for this tensor's read: a binary search, the rest fixed.
static void ProbeSize(Run& r, const Binding& b) {
    const char* op = ReadPlanFor(b.desc.type).name;
    Desc d = b.desc;
    UINT64 elements;
    if (!ElementCount(d, elements)) return Say("probe %s %s -1 refused-desc", b.name.c_str(), op);
    HRESULT hr = CreateRead(r.g, d, nullptr);
    if (FAILED(hr) || d.total == 0) return Say("probe %s %s -1 0x%08x", b.name.c_str(), op, (unsigned)hr);
    UINT64 low = 1, high = b.desc.total;  // high is accepted
    while (low < high) {
        d.total = low + (high - low) / 2;
        if (SUCCEEDED(CreateRead(r.g, d, nullptr))) high = d.total;
        else low = d.total + 1;
    }
    Say("probe %s %s %llu", b.name.c_str(), op, (unsigned long long)high);
}

// The three parts of a quantized weight together, through the operator its quantized line names (DEQUANTIZE, or
// ELEMENT_WISE_DEQUANTIZE_LINEAR below feature level 6.3); output in the scales' type.
static void Dequantize(Run& r, const QuantForm& q) {
    const Binding *w = &q.parts[0], *s = &q.parts[1], *z = &q.parts[2];
    std::string name = q.record + "/" + q.form;
    bool linear = q.op == "ELEMENT_WISE_DEQUANTIZE_LINEAR";
    const char* op = linear ? "ELEMENT_WISE_DEQUANTIZE_LINEAR" : "DEQUANTIZE";
    if (RefuseBinding(r, "dequantize", name, op, s->desc.type, {w, s, z})) return;
    if (RefuseDesc(r, "dequantize", name, op, s->desc.type, w->desc)) return;
    std::vector<Step> steps(1);
    long long dumpAt = -1;
    HRESULT hr = linear ? CreateDequantizeLinear(r.g, w->desc, s->desc, z->desc, s->desc.type, &steps[0].op)
                        : CreateDequantize(r.g, w->desc, s->desc, z->desc, s->desc.type, &steps[0].op);
    steps[0].inputs = {BindingOf(r, *w), BindingOf(r, *s), BindingOf(r, *z)};
    UINT64 outBytes = Packed(s->desc.type, w->desc).total;
    if (SUCCEEDED(hr)) hr = Execute(r, steps, s->desc.type, outBytes, dumpAt);
    Report(r, "dequantize", name, op, hr, s->desc.type, outBytes, dumpAt);
}

// The blocked form DEQUANTIZEd into a GPU buffer, then GEMM A [1,1,M,K] x B^T with B that [1,1,N,K]: the weight
// as a MatMulNBits node uses it, never leaving the GPU in between.
static void RunGemm(Run& r, const Gemm& job) {
    const Binding *w = &job.form->parts[0], *s = &job.form->parts[1], *z = &job.form->parts[2];
    const char* op = "DEQUANTIZE+GEMM";
    if (RefuseBinding(r, "gemm", job.record, op, DML_TENSOR_DATA_TYPE_FLOAT32, {w, s, z})) return;
    const DML_TENSOR_DATA_TYPE f32 = DML_TENSOR_DATA_TYPE_FLOAT32;
    Desc a = Packed(f32, {1, 1, job.m, job.k}), b = Packed(f32, {1, 1, job.n, job.k});
    Desc out = Packed(f32, {1, 1, job.m, job.n});
    DML_BUFFER_TENSOR_DESC ab = a.Get(), bb = b.Get(), ob = out.Get();
    DML_TENSOR_DESC at = {DML_TENSOR_TYPE_BUFFER, &ab}, bt = {DML_TENSOR_TYPE_BUFFER, &bb};
    DML_TENSOR_DESC ot = {DML_TENSOR_TYPE_BUFFER, &ob};
    DML_GEMM_OPERATOR_DESC gemm = {&at, &bt, nullptr, &ot, DML_MATRIX_TRANSFORM_NONE, DML_MATRIX_TRANSFORM_TRANSPOSE,
                                   1.0f, 0.0f, nullptr};  // Alpha 1, Beta 0, no C
    std::vector<Step> steps(2);
    ComPtr<ID3D12Resource> aBuffer;  // A's own buffer, released when this product is done
    long long dumpAt = -1;
    HRESULT hr = CreateDequantize(r.g, w->desc, s->desc, z->desc, DML_TENSOR_DATA_TYPE_FLOAT32, &steps[0].op);
    if (SUCCEEDED(hr)) hr = MakeOperator(r.g, {DML_OPERATOR_GEMM, &gemm}, &steps[1].op);
    if (SUCCEEDED(hr))
        hr = CreateBuffer(r.g, a.total, D3D12_HEAP_TYPE_DEFAULT, D3D12_RESOURCE_STATE_COPY_DEST, aBuffer);
    if (SUCCEEDED(hr)) {
        FILE* f = fopen(job.file.c_str(), "rb");
        if (!f) BadInput("cannot open " + job.file);
        hr = Upload(r.g, aBuffer.Get(), a.total, [&](void* p, size_t n) {
            if (fread(p, 1, n, f) != n) BadInput("cannot read " + job.file);
        });
        fclose(f);
    }
    if (SUCCEEDED(hr)) hr = Grow(r.g, r.g.intermediate, b.total, D3D12_HEAP_TYPE_DEFAULT);
    // DEQUANTIZE's output too starts as 0xA5: a DEQUANTIZE that writes nothing must not hand GEMM the zeros of a new
    // buffer, or the weight of the product before.
    if (SUCCEEDED(hr) && FAILED(hr = RecordFill(r.g, r.g.intermediate.resource.Get(), b.total))) Discard(r.g);
    if (SUCCEEDED(hr)) {
        Bind dequantized = {r.g.intermediate.resource.Get(), 0, b.total, false};
        steps[0].inputs = {BindingOf(r, *w), BindingOf(r, *s), BindingOf(r, *z)};
        steps[0].output = dequantized;
        steps[1].inputs = {{aBuffer.Get(), 0, a.total, false}, dequantized, {}};  // A, B, and no C
        hr = Execute(r, steps, f32, out.total, dumpAt);
    }
    Report(r, "gemm", job.record, op, hr, DML_TENSOR_DATA_TYPE_FLOAT32, out.total, dumpAt);
}

// ---------------------------------------------------------------------------------------------- start-up

typedef HRESULT(WINAPI* PFN_DMLCreateDevice1)(ID3D12Device*, DML_CREATE_DEVICE_FLAGS, DML_FEATURE_LEVEL, REFIID,
                                              void**);

// A device that cannot be made is exit 1.
static void Need(HRESULT hr, const char* what) {
    if (FAILED(hr)) Say("device FAILED %s 0x%08x", what, (unsigned)hr), exit(1);
}

// With debug (--debug): the Direct3D 12 debug layer (EnableDebugLayer, before the device) and DirectML's
// (DML_CREATE_DEVICE_FLAG_DEBUG). Where either is missing, that is exit 2 naming it: a run asked for them.
static void CreateDevices(Gpu& g, bool debug) {
    std::string missing;
    if (debug) {
        ComPtr<ID3D12Debug> layer;
        HRESULT hr = D3D12GetDebugInterface(IID_PPV_ARGS(&layer));
        if (SUCCEEDED(hr)) layer->EnableDebugLayer();
        else missing = "the Direct3D 12 debug layer (D3D12GetDebugInterface returned " + Hex(hr) + "; on Windows it "
                       "is the optional feature Graphics Tools)";
    }
    // Direct3D 12 on the default adapter; one queue, allocator and command list that every step reuses.
    Need(D3D12CreateDevice(nullptr, D3D_FEATURE_LEVEL_11_0, IID_PPV_ARGS(&g.device)), "D3D12CreateDevice");
    D3D12_COMMAND_QUEUE_DESC qd = {};
    qd.Type = D3D12_COMMAND_LIST_TYPE_DIRECT;
    Need(g.device->CreateCommandQueue(&qd, IID_PPV_ARGS(&g.queue)), "CreateCommandQueue");
    Need(g.device->CreateCommandAllocator(qd.Type, IID_PPV_ARGS(&g.allocator)), "CreateCommandAllocator");
    Need(g.device->CreateCommandList(0, qd.Type, g.allocator.Get(), nullptr, IID_PPV_ARGS(&g.list)),
         "CreateCommandList");
    Need(g.device->CreateFence(0, D3D12_FENCE_FLAG_NONE, IID_PPV_ARGS(&g.fence)), "CreateFence");
    g.fenceEvent = Fault("no-event") ? (SetLastError(ERROR_NOT_ENOUGH_MEMORY), nullptr)
                                     : CreateEventW(nullptr, FALSE, FALSE, nullptr);
    if (!g.fenceEvent) Need(HRESULT_FROM_WIN32(GetLastError()), "CreateEventW");  // (every wait needs it)

    // DirectML from the DirectML.dll beside the program (the redistributable, up to feature level 6.4) rather than
    // an older copy in System32: load it by name and look DMLCreateDevice1 up.
    HMODULE dll = LoadLibraryW(L"DirectML.dll");
    if (!dll) Need(HRESULT_FROM_WIN32(GetLastError()), "LoadLibrary(DirectML.dll)");
    FARPROC proc = GetProcAddress(dll, "DMLCreateDevice1");
    auto create = reinterpret_cast<PFN_DMLCreateDevice1>(reinterpret_cast<void (*)()>(proc));
    if (!create) Need(HRESULT_FROM_WIN32(GetLastError()), "GetProcAddress(DMLCreateDevice1)");
    HRESULT hr = create(g.device.Get(), debug ? DML_CREATE_DEVICE_FLAG_DEBUG : DML_CREATE_DEVICE_FLAG_NONE,
                        DML_FEATURE_LEVEL_1_0, IID_PPV_ARGS(&g.dml));
    if (debug && hr == DXGI_ERROR_SDK_COMPONENT_MISSING)
        missing += (missing.empty() ? "" : ", and ") + std::string("the DirectML debug layer (DMLCreateDevice1 with "
                   "DML_CREATE_DEVICE_FLAG_DEBUG returned ") + Hex(hr) + " DXGI_ERROR_SDK_COMPONENT_MISSING: put "
                   "DirectML.Debug.dll, from the Microsoft.AI.DirectML package, beside DirectML.dll)";
    if (!missing.empty()) BadInput("--debug: this machine lacks " + missing + "; run without --debug");
    Need(hr, "DMLCreateDevice1");
    Need(g.dml->CreateCommandRecorder(IID_PPV_ARGS(&g.recorder)), "CreateCommandRecorder");

    const DML_FEATURE_LEVEL levels[] = {
        DML_FEATURE_LEVEL_1_0, DML_FEATURE_LEVEL_2_0, DML_FEATURE_LEVEL_2_1, DML_FEATURE_LEVEL_3_0,
        DML_FEATURE_LEVEL_3_1, DML_FEATURE_LEVEL_4_0, DML_FEATURE_LEVEL_4_1, DML_FEATURE_LEVEL_5_0,
        DML_FEATURE_LEVEL_5_1, DML_FEATURE_LEVEL_5_2, DML_FEATURE_LEVEL_6_0, DML_FEATURE_LEVEL_6_1,
        DML_FEATURE_LEVEL_6_2, DML_FEATURE_LEVEL_6_3, DML_FEATURE_LEVEL_6_4};
    DML_FEATURE_QUERY_FEATURE_LEVELS query = {(UINT)(sizeof levels / sizeof levels[0]), levels};
    DML_FEATURE_DATA_FEATURE_LEVELS data = {};
    // (a device whose level cannot be told is no usable device: taking it for 1.0 would misjudge every list)
    Need(Fault("no-feature-levels") ? E_FAIL
                                    : g.dml->CheckFeatureSupport(DML_FEATURE_FEATURE_LEVELS, sizeof query, &query,
                                                                 sizeof data, &data),
         "CheckFeatureSupport(DML_FEATURE_FEATURE_LEVELS)");
    g.level = data.MaxSupportedFeatureLevel;
}

// The device as dmlbridge's command line describes a target: its feature level and the types it lacks.
static void PrintDevice(Gpu& g) {
    std::string unsupported;
    for (UINT t = 1; t < kTypeCount; ++t) {
        DML_FEATURE_QUERY_TENSOR_DATA_TYPE_SUPPORT query = {(DML_TENSOR_DATA_TYPE)t};
        DML_FEATURE_DATA_TENSOR_DATA_TYPE_SUPPORT data = {};
        HRESULT hr = g.dml->CheckFeatureSupport(DML_FEATURE_TENSOR_DATA_TYPE_SUPPORT, sizeof query, &query,
                                                sizeof data, &data);
        if (FAILED(hr) || !data.IsSupported)
            unsupported += (unsupported.empty() ? "" : ",") + std::string(kTypeNames[t]);
    }
    std::string level = LevelText(g.level);
    Say("device feature-level %s", level.c_str());
    Say("device flags --feature-level %s%s%s", level.c_str(), unsupported.empty() ? "" : " --unsupported ",
        unsupported.c_str());
}

// Known answers, through the path every tensor takes: a broken stack can return zeros with S_OK everywhere.
static std::string SelfTest(Run& r) {
    const UINT32 bits[16] = {0x00000000, 0x80000000, 0x3F800000, 0xBFC00000, 0x7F7FFFFF, 0x00800000, 0x00000001,
                             0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC12345, 0xFFA00001, 0x40490FDB, 0x3DCCCCCD,
                             0xC2F6E979, 0x4B000001};  // +-0, 1, -1.5, max, min normal, subnormals, +-inf, NaNs...
    const float one = 1.0f, half = 0.5f, dequantized[5] = {-0.5f, 0.0f, 0.5f, 1.0f, 1.5f};  // (x - 2) * 0.5
    const unsigned char nibbles[3] = {0x21, 0x43, 0x05};                                   // UINT4 1, 2, 3, 4, 5
    unsigned char data[256] = {};
    memcpy(data, &one, 4);  // the 4-bit reads' scale; their zero point is the 0 at 16
    memcpy(data + 32, bits, sizeof bits);
    memcpy(data + 96, nibbles, sizeof nibbles);
    memcpy(data + 112, &half, 4);
    data[128] = 2;
    char why[160] = "";
    HRESULT hr = CreateBuffer(r.g, sizeof data, D3D12_HEAP_TYPE_DEFAULT, D3D12_RESOURCE_STATE_COPY_DEST, r.constants);
    if (SUCCEEDED(hr)) hr = Upload(r.g, r.constants.Get(), sizeof data, [&](void* p, size_t n) { memcpy(p, data, n); });
    if (FAILED(hr)) snprintf(why, sizeof why, "uploading its data: HRESULT 0x%08x", (unsigned)hr);

    std::vector<Step> steps(1);
    // Runs steps[0] into an output of `count` 32-bit values of outType and returns them, or says why in `why`.
    auto run = [&](const char* what, HRESULT result, DML_TENSOR_DATA_TYPE outType, size_t count) {
        std::vector<unsigned char> got;
        std::vector<UINT32> values(count);
        long long unused;
        if (SUCCEEDED(result)) result = Execute(r, steps, outType, 4 * count, unused, &got);
        if (FAILED(result)) snprintf(why, sizeof why, "%s: HRESULT 0x%08x", what, (unsigned)result);
        else memcpy(values.data(), got.data(), 4 * count);
        return values;
    };
    auto differs = [&](const char* what, size_t i, UINT32 got, UINT32 expected, const char* allowed) {
        if (!why[0])
            snprintf(why, sizeof why, "%s: value %u is 0x%08x, expected 0x%08x%s", what, (unsigned)i, (unsigned)got,
                     (unsigned)expected, allowed);
    };
    // The 16 values as UINT32, the same bytes: IDENTITY is then a plain copy, so every bit comes back.
    steps[0].inputs = {{r.constants.Get(), 32, 64, false}};
    if (!why[0]) {
        hr = CreateRead(r.g, Packed(DML_TENSOR_DATA_TYPE_UINT32, {1, 1, 4, 4}), &steps[0].op);
        std::vector<UINT32> got = run("IDENTITY as UINT32", hr, DML_TENSOR_DATA_TYPE_UINT32, 16);
        for (size_t i = 0; !why[0] && i < 16; ++i)
            if (got[i] != bits[i]) differs("IDENTITY as UINT32", i, got[i], bits[i], "");
    }
    // As FLOAT32: Direct3D's float rules let a GPU flush a subnormal to zero and drop a NaN's payload (counted and
    // printed, not failed); anything else must come back as it went in.
    if (!why[0]) {
        hr = CreateRead(r.g, Packed(DML_TENSOR_DATA_TYPE_FLOAT32, {1, 1, 4, 4}), &steps[0].op);
        std::vector<UINT32> got = run("IDENTITY as FLOAT32", hr, DML_TENSOR_DATA_TYPE_FLOAT32, 16);
        unsigned subnormals = 0, flushed = 0, nans = 0, changed = 0;
        for (size_t i = 0; !why[0] && i < 16; ++i) {
            bool subnormal = (bits[i] & 0x7F800000) == 0 && (bits[i] & 0x007FFFFF);
            bool nan = (bits[i] & 0x7F800000) == 0x7F800000 && (bits[i] & 0x007FFFFF);
            bool gotNan = (got[i] & 0x7F800000) == 0x7F800000 && (got[i] & 0x007FFFFF);
            subnormals += subnormal, nans += nan;
            if (got[i] == bits[i]) continue;
            if (subnormal && (got[i] & 0x7FFFFFFF) == 0) ++flushed;
            else if (nan && gotNan) ++changed;
            else differs("IDENTITY as FLOAT32", i, got[i], bits[i], " (or a zero for a subnormal, a NaN for a NaN)");
        }
        if (!why[0])
            Say("self-test float-typed IDENTITY: %u of %u subnormals flushed, %u of %u NaN payloads changed", flushed,
                subnormals, changed, nans);
    }
    if (!why[0] && r.g.level >= DML_FEATURE_LEVEL_6_3) {  // (no 4-bit types below 6.3)
        Desc u4 = Packed(DML_TENSOR_DATA_TYPE_UINT4, {1, 1, 1, 5});
        steps[0].inputs = {{r.constants.Get(), 96, 4}, {r.constants.Get(), 112, 4}, {r.constants.Get(), 128, 4}};
        hr = CreateDequantize(r.g, u4, Broadcast(DML_TENSOR_DATA_TYPE_FLOAT32, u4),
                              Broadcast(DML_TENSOR_DATA_TYPE_UINT4, u4), DML_TENSOR_DATA_TYPE_FLOAT32, &steps[0].op);
        std::vector<UINT32> got = run("DEQUANTIZE", hr, DML_TENSOR_DATA_TYPE_FLOAT32, 5);
        for (size_t i = 0; !why[0] && i < 5; ++i) {
            UINT32 expected;
            memcpy(&expected, &dequantized[i], 4);
            if (got[i] != expected) differs("DEQUANTIZE", i, got[i], expected, "");  // (no subnormal, no NaN)
        }
    }
    return why;
}

// ------------------------------------------------------------------------------------------ command line

struct Options {
    std::string bindings, dir, dump;
    std::vector<std::string> only, gemm;
    bool probeSizes = false, selfTestOnly = false, debug = false;
};

static Options ParseOptions(int argc, char** argv) {
    Options o;
    auto usage = [](const std::string& why) {
        BadInput(why + "\nusage: dmlupload BINDINGS [--dir DIR] [--dump FILE] [--only NAME]... [--probe-sizes]"
                       " [--gemm RECORD=A.bin]... [--self-test-only] [--debug]");
    };
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        bool hasValue = a == "--dir" || a == "--dump" || a == "--only" || a == "--gemm";
        if (hasValue && i + 1 >= argc) usage(a + " needs a value");
        if (a == "--dir") o.dir = argv[++i];
        else if (a == "--dump") o.dump = argv[++i];
        else if (a == "--only") o.only.push_back(argv[++i]);
        else if (a == "--gemm") o.gemm.push_back(argv[++i]);
        else if (a == "--probe-sizes") o.probeSizes = true;
        else if (a == "--self-test-only") o.selfTestOnly = true;
        else if (a == "--debug") o.debug = true;
        else if (a.size() > 1 && a[0] == '-') usage("unknown option " + a);
        else if (o.bindings.empty()) o.bindings = a;
        else usage("more than one BINDINGS file");
    }
    if (o.bindings.empty() && !o.selfTestOnly) usage("no BINDINGS file");
    size_t slash = o.bindings.find_last_of("/\\");  // the buffer files sit beside the list
    if (o.dir.empty()) o.dir = slash == std::string::npos ? "." : o.bindings.substr(0, slash + (slash == 0));
    return o;
}

static bool Selected(const Options& o, std::initializer_list<std::string> names) {
    for (const std::string& n : o.only)
        if (std::find(names.begin(), names.end(), n) != names.end()) return true;
    return o.only.empty();
}

// The --only names and --gemm jobs, checked against the list before the GPU starts.
static std::vector<Gemm> CheckOptions(const Options& o, const BindingList& list) {
    for (const std::string& n : o.only) {
        bool found = false;
        for (const Binding& t : list.tensors) found |= t.name == n;
        for (const Consumer& c : list.consumers) found |= c.binding.name == n;
        for (const QuantForm& q : list.forms)
            for (const Binding& p : q.parts) found |= n == q.record || n == q.record + "/" + q.form || n == p.name;
        if (!found) BadInput("--only " + n + ": no tensor, consumer, part or record of that name in the list");
    }
    std::vector<Gemm> jobs;
    for (const std::string& arg : o.gemm) {
        Gemm job;
        size_t eq = arg.find('=');
        job.record = arg.substr(0, eq);
        job.file = eq == std::string::npos ? "" : arg.substr(eq + 1);
        if (job.record.empty() || job.file.empty()) BadInput("--gemm " + arg + ": expected RECORD=A.bin");
        for (const QuantForm& q : list.forms)
            if (q.record == job.record && q.form == "blocked") job.form = &q;
        if (!job.form) BadInput("--gemm " + job.record + ": the list has no blocked form of that record");
        const Desc& w = job.form->parts[0].desc;
        bool leadingOnes = w.dims >= 2 && std::count(w.sizes, w.sizes + w.dims - 2, 1u) == (ptrdiff_t)w.dims - 2;
        if (!leadingOnes || job.form->parts[1].desc.type != DML_TENSOR_DATA_TYPE_FLOAT32)
            BadInput("--gemm " + job.record + ": needs a weight [..., N, K] with leading 1s and FLOAT32 scales");
        job.n = w.sizes[w.dims - 2];
        job.k = w.sizes[w.dims - 1];
        UINT64 elements;
        if (job.n == 0 || job.k == 0 || !ElementCount(w, elements))
            BadInput("--gemm " + job.record + ": its weight [N, K] = [" + Str(job.n) + ", " + Str(job.k) + "] is " +
                     (ElementCount(w, elements) ? "empty" : "more than the 2^32 - 1 elements of a DirectML tensor"));
        FILE* f = fopen(job.file.c_str(), "rb");
        if (!f) BadInput("--gemm: cannot open " + job.file);
        _fseeki64(f, 0, SEEK_END);
        long long bytes = _ftelli64(f), row = 4ll * job.k;
        fclose(f);
        if (bytes <= 0 || bytes % row || bytes / row > 0xFFFFFFFFll)
            BadInput("--gemm: " + job.file + " (" + Str((UINT64)bytes) + " bytes) is not M rows of K = " + Str(job.k) +
                     " FLOAT32");
        job.m = (UINT)(bytes / row);
        if ((UINT64)job.m * job.k > kMaxElements || (UINT64)job.m * job.n > kMaxElements)
            BadInput("--gemm: " + job.file + " is M = " + Str(job.m) + " rows: A [M, K] or the output [M, N] would be "
                     "more than the 2^32 - 1 elements of a DirectML tensor");
        jobs.push_back(job);
    }
    return jobs;
}

// ------------------------------------------------------------------------------------------------- main

int main(int argc, char** argv) {
    Options opt = ParseOptions(argc, argv);
    if (const char* faults = getenv("DMLUPLOAD_FAULTS")) {
        std::string rest = std::string(faults) + ",";
        for (size_t at = 0, comma; (comma = rest.find(',', at)) != std::string::npos; at = comma + 1) {
            std::string name = rest.substr(at, comma - at);
            if (std::find_if(std::begin(kFaults), std::end(kFaults), [&](const char* f) { return name == f; }) ==
                std::end(kFaults))
                BadInput("DMLUPLOAD_FAULTS: unknown fault '" + name + "' (README.md lists them)");
        }
    }
    Run r;
    std::vector<Gemm> gemms;
    // The input first, whole: a malformed list or a missing file costs no GPU start-up (exit 2).
    if (!opt.selfTestOnly) {
        r.list = ReadBindingList(opt.bindings, opt.dir);
        if (Fault("hold-files")) {  // (every buffer file open: the suite removes one meanwhile, then says go on)
            fprintf(stderr, "dmlupload: buffer files open\n");
            fflush(stderr);
            getchar();
        }
        gemms = CheckOptions(opt, r.list);
        if (!opt.dump.empty() && !(r.dump = fopen(opt.dump.c_str(), "wb"))) BadInput("cannot create " + opt.dump);
    }

    // 1. The devices: Direct3D 12, then DirectML on it.
    CreateDevices(r.g, opt.debug);
    PrintDevice(r.g);
    if (!opt.selfTestOnly && r.list.target > (UINT)r.g.level)
        fprintf(stderr, "dmlupload: warning: the list targets feature level %s, the device has %s\n",
                LevelText(r.list.target).c_str(), LevelText(r.g.level).c_str());

    // 2. Known answers, before any result is trusted.
    std::string failure = SelfTest(r);
    if (!failure.empty()) return Say("self-test FAILED %s", failure.c_str()), 3;
    Say("self-test ok");
    if (opt.selfTestOnly) return 0;

    // 3. One default-heap buffer per uploaded buffer file (UPLOAD gpu), filled through the upload heap and left in
    //    UNORDERED_ACCESS. The cpu ones hold values a program reads from the file, as operator attributes.
    for (size_t i = 0; i < r.list.buffers.size(); ++i) {
        const BufferLine& b = r.list.buffers[i];
        r.buffers.emplace_back();
        if (!b.upload) {
            CloseHandle(b.file);
            Say("buffer %u %s %llu not-uploaded", (unsigned)i, b.encoded.c_str(), (unsigned long long)b.size);
            continue;
        }
        HRESULT hr =
            CreateBuffer(r.g, b.size, D3D12_HEAP_TYPE_DEFAULT, D3D12_RESOURCE_STATE_COPY_DEST, r.buffers.back());
        if (SUCCEEDED(hr)) hr = Upload(r.g, r.buffers.back().Get(), b.size, [&](void* p, size_t n) {
            // (the handle the list's check opened: the file that was checked, read from its start)
            for (DWORD got = 0; n > 0; n -= got, p = (char*)p + got)
                if (!ReadFile(b.file, p, (DWORD)std::min<size_t>(n, 1u << 30), &got, nullptr) || got == 0)
                    BadInput("buffer " + Str(i) + ": cannot read " + b.encoded);
        });
        CloseHandle(b.file);
        Say("buffer %u %s %llu %s", (unsigned)i, b.encoded.c_str(), (unsigned long long)b.size,
            SUCCEEDED(hr) ? "uploaded" : "FAILED");
        if (hr == E_OUTOFMEMORY) {  // the device works, it has not that much memory: exit 5, not "no usable device"
            fprintf(stderr, "dmlupload: buffer %u (%s, %llu bytes): out of memory (E_OUTOFMEMORY 0x%08x) creating or "
                    "filling its Direct3D 12 buffer; convert with a smaller --max-buffer-bytes, or use a device "
                    "with more memory\n", (unsigned)i, b.encoded.c_str(), (unsigned long long)b.size, (unsigned)hr);
            return 5;
        }
        Need(hr, "uploading a buffer");
    }

    // 4. Every tensor as a model binds it, DML_BUFFER_BINDING{buffer, OFFSET, TotalTensorSizeInBytes} with its own
    //    desc, read by DirectML into an exact output and read back; then the same bytes through each consumer's
    //    desc. A tensor read on the CPU is bound nowhere: its values are an operator attribute.
    size_t next = 0;  // the next consumer line
    for (size_t i = 0; i < r.list.tensors.size(); ++i) {
        const Binding& t = r.list.tensors[i];
        if (Selected(opt, {t.name}) && t.readsOn == "cpu") {
            Say("cpu %s %u %llu %llu read on the CPU, not bound", t.name.c_str(), t.buffer,
                (unsigned long long)t.offset, (unsigned long long)t.desc.total);
            ++r.onCpu;
        } else if (Selected(opt, {t.name})) {
            ReadTensor(r, t);
            if (opt.probeSizes) ProbeSize(r, t);
        }
        for (; next < r.list.consumers.size() && r.list.consumers[next].tensor == i; ++next) {
            const Consumer& c = r.list.consumers[next];
            if (!Selected(opt, {c.binding.name, t.name})) continue;
            if (c.undecided) Say("consumer %s undecided", c.binding.name.c_str()), ++r.undecided;
            else ReadTensor(r, c.binding, "consumer");
        }
    }
    // 5. Quantized weights: each part alone, then the three together as DEQUANTIZE, and GEMM on request.
    for (const QuantForm& q : r.list.forms) {
        for (const Binding& part : q.parts)
            if (Selected(opt, {part.name, q.record})) ReadTensor(r, part);
        if (Selected(opt, {q.record, q.record + "/" + q.form})) Dequantize(r, q);
        for (const Gemm& job : gemms)
            if (job.form == &q) RunGemm(r, job);
    }
    if (r.dump && fclose(r.dump) != 0) BadInput("cannot write the dump file");
    Say("summary %u executed, %u refused, %u binding-refused, %u desc-refused, %u on-cpu, %u undecided", r.executed,
        r.refused, r.bindingRefused, r.descRefused, r.onCpu, r.undecided);
    return 0;
}

// pch.cpp — the translation unit that builds a shared precompiled header (the tests' and the
// command-line programs', cmake/ActiveKV.cmake); it has no code of its own.

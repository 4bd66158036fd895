"""The rule of tests that need system tools: skipped where one is missing, failed instead
under ``POLYTF_REQUIRE_SYSTEM_TOOLS=1`` (CI)."""

from __future__ import annotations

import pytest
from system_tools import find_tool, require_module, require_tool

MISSING = "polytf-no-such-tool"


def test_a_missing_tool_skips_with_its_name_and_purpose(monkeypatch):
    monkeypatch.delenv("POLYTF_REQUIRE_SYSTEM_TOOLS", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"the program '{MISSING}' is missing \\(runs the tests\\)"):
        require_tool(MISSING, "runs the tests")
    with pytest.raises(pytest.skip.Exception, match="the Python module 'polytf_no_such_module'"):
        require_module("polytf_no_such_module", "drives the tests")


def test_a_missing_tool_fails_where_tools_are_required(monkeypatch):
    monkeypatch.setenv("POLYTF_REQUIRE_SYSTEM_TOOLS", "1")
    with pytest.raises(pytest.fail.Exception, match="POLYTF_REQUIRE_SYSTEM_TOOLS=1 requires it"):
        require_tool(MISSING, "runs the tests")
    with pytest.raises(pytest.fail.Exception, match="POLYTF_REQUIRE_SYSTEM_TOOLS=1 requires it"):
        require_module("polytf_no_such_module", "drives the tests")


def test_a_present_tool_is_found_on_the_path_or_in_a_search_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYTF_REQUIRE_SYSTEM_TOOLS", "1")
    assert require_tool("sh", "runs shell scripts").name == "sh"
    assert require_module("json", "parses JSON").loads("1") == 1
    tool = tmp_path / "v15" / "bin" / MISSING
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert find_tool(MISSING, [str(tmp_path / "v*" / "bin")]) == tool
    assert find_tool(MISSING) is None

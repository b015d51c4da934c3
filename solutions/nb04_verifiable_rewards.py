# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   course:
#     profile: BASE-CPU
# ---

# %% [markdown]
# # 第 4 课　可验证奖励（RLVR）：验证器、奖励分量与奖励投机
#
# ## 导读
#
# 前三课把奖励当成“已经给好的数字”：每个候选一个分数，组内标准化成优势，再送进受裁剪的策略损失。
# 这一课回到这个数字是怎么来的。可验证奖励强化学习（RLVR）不是一种新的更新算法，而是一类**奖励来源**：
# 奖励由答案比对、单元测试或环境终态这类可以重复执行的检查产生，GRPO、PPO 都可以接上它。
#
# 能重复执行不等于可靠。验证器只检查它写进去的规则，模型会朝规则的漏洞优化。这一课你将：
#
# 1. 实现本课程固定版本的整数答案验证器 `integer-answer-v1`，把正确性、格式、验证状态分开记录；
# 2. 用一个真正执行代码的小验证器，看清“超时 / 验证器出错”和“任务做错”为什么必须分开记；
# 3. 亲手运行两个奖励投机的例子：格式过关但答案错误的回答，以及一个可被钻空子的验证器和它的修复；
# 4. 按 TRL 的规则组合多个奖励函数：无法评分记为 `None → NaN`，加权和跳过 NaN 列，全部无法评分的行保持 NaN。

# %% [markdown]
# ## 运行环境
#
# - Profile：**BASE-CPU**（只需要 torch，不加载模型，不需要 GPU）。
# - 上面的启动单元格已经把课程目录放进 `sys.path`，并打印了本 Profile 的预检表；表里有缺失项时先按提示修好环境。
# - 运行时间：`make bench` 在**空闲的** 2 核 CPU 上测量本课（不含内核启动）；机器繁忙时可能慢 2–4 倍。
#   笔记本最后一个代码单元会打印这次运行实际用了多少秒，以它为准。
# - 掩码、ε、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。
#
# ## 前置阅读
#
# - 第 1 课：组内优势 `A_i = (r_i − mean_g) / max(std_g, eps)`，以及全组奖励相同时优势为 0。
# - 第 2 课：奖励只通过优势进入损失。组内标准化对**正仿射变换**不变：把一组奖励都乘以同一个正数再加同一个常数
#   （$r \mapsto a r + b$，$a>0$），优势不变；但它**不是**只看排序——任意单调变换会改变优势。例如 `[0, 0.1, 1]` 与
#   `[0, 0.9, 1]` 排序相同，优势却明显不同（下面的单元格当场算出来）。所以验证器给出的**数值间距**也会进入更新。
# - 这一点决定了本课的关注点：只要验证器把错误回答排在正确回答前面，或者把分数间距定错，后面的优化就会忠实地放大这个错误。

# %%
import math
import re
import subprocess
import sys
import time

import torch

from tools.grading import assert_close, expect_value_error
from tools.lessons.nb01_group_advantages import compute_group_advantages

_lesson_started = time.perf_counter()
torch.manual_seed(0)

# %%
def one_group(rewards):
    """Advantages of a single group with lesson 1's compute_group_advantages."""
    rewards = torch.tensor(rewards, dtype=torch.float64)  # [G]
    return compute_group_advantages(rewards, torch.zeros(len(rewards), dtype=torch.long))  # [G]


base = [0.0, 0.1, 1.0]
affine = [3.0 * r + 2.0 for r in base]  # positive affine: a = 3 > 0, b = 2
same_order = [0.0, 0.9, 1.0]             # same ranking, different spacing
for name, rewards in (("[0, 0.1, 1]", base), ("3r + 2", affine), ("[0, 0.9, 1]", same_order)):
    print(f"{name:>12}: 优势 = {[round(a, 4) for a in one_group(rewards).tolist()]}")
assert_close(one_group(affine), one_group(base), atol=1e-12, what="正仿射变换后的优势")
assert (one_group(same_order) - one_group(base)).abs().max().item() > 0.5, "same ranking, different advantages"

# %% [markdown]
# ## 第 1 步　验证器 `integer-answer-v1`
#
# 本课程的最终实验（第 6 课）使用的验证器有固定的版本号 `integer-answer-v1`。版本号意味着规则冻结：
# 规则一改，过去记录的奖励就不能和新的比较，必须换版本号并整体重跑。规则如下。
#
# | 字段 | 含义 |
# | --- | --- |
# | `verifier_id` | 固定为 `"integer-answer-v1"` |
# | `parsed_answer` | 先去掉回答首尾空白；取其中**最后一个**匹配正则 `-?\d+` 的片段，转成 `int`；一个都没有时为 `None` |
# | `status` | 找到整数为 `"ok"`；一个整数都没有为 `"unjudgeable"`（不可判定） |
# | `correctness` | `parsed_answer == expected_answer` 时为 `1.0`，否则（包括不可判定）为 `0.0` |
# | `format_pass` | 去掉首尾空白后的文本**整体恰好是一个整数**（`-?\d+` 完整匹配）时为 `1.0`，否则 `0.0` |
# | `total_reward` | `correctness_weight * correctness + format_weight * format_pass` |
#
# 为什么取**最后一个**整数？模型常常先复述题目里的数字，再给出结论（“2 + 2 等于 4”）；取第一个整数会把复述当成答案。
#
# 输入契约（违反时抛出带中文说明的 `ValueError`）：
# - `response` 必须是 `str`；
# - `expected_answer` 必须是 `int`（注意 `bool` 是 `int` 的子类，但 `True` 不是一个合法的期望答案，要拒绝）；
# - 两个权重必须是有限、非负的实数（同样拒绝 `bool`）。
#
# ### TODO 1　实现 `verify_integer_response`

# %% nbgrader={"solution": true, "grade_id": "verify_integer_response"}
#@save
import math  # noqa: F811 (a saved cell imports what it uses)
import re  # noqa: F811

VERIFIER_ID = "integer-answer-v1"
INTEGER_PATTERN = re.compile(r"-?\d+")


def _check_weight(name, value):
    """Shared input contract of the verifier weights: a finite, non-negative real number (bool rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} 必须是实数（int 或 float），收到 {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} 必须是有限的非负数，收到 {value!r}")
    return float(value)


def verify_integer_response(response, expected_answer, correctness_weight=1.0, format_weight=0.1):
    """Score one response with the integer-answer-v1 rules.

    Returns a dict with keys verifier_id, status, parsed_answer, correctness, format_pass, total_reward.
    """
    ### BEGIN SOLUTION
    if not isinstance(response, str):
        raise ValueError(f"response 必须是字符串，收到 {type(response).__name__}")
    if isinstance(expected_answer, bool) or not isinstance(expected_answer, int):
        raise ValueError(f"expected_answer 必须是 int（不接受 bool），收到 {type(expected_answer).__name__}")
    correctness_weight = _check_weight("correctness_weight", correctness_weight)
    format_weight = _check_weight("format_weight", format_weight)

    stripped = response.strip()
    matches = INTEGER_PATTERN.findall(stripped)
    parsed_answer = int(matches[-1]) if matches else None
    status = "ok" if parsed_answer is not None else "unjudgeable"
    correctness = 1.0 if parsed_answer is not None and parsed_answer == expected_answer else 0.0
    format_pass = 1.0 if INTEGER_PATTERN.fullmatch(stripped) is not None else 0.0
    total_reward = correctness_weight * correctness + format_weight * format_pass
    return {
        "verifier_id": VERIFIER_ID,
        "status": status,
        "parsed_answer": parsed_answer,
        "correctness": correctness,
        "format_pass": format_pass,
        "total_reward": total_reward,
    }
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_verify_integer_response_visible", "points": 3}
"""检查：integer-answer-v1 的解析（最后一个整数）、状态、正确性、格式分与加权总分，以及输入契约（可见测试）。"""
_expected_keys = {"verifier_id", "status", "parsed_answer", "correctness", "format_pass", "total_reward"}

_record = verify_integer_response("4", 4)
assert set(_record) == _expected_keys, f"返回的键应为 {sorted(_expected_keys)}，实际 {sorted(_record)}"
assert _record["verifier_id"] == "integer-answer-v1"
assert _record["status"] == "ok" and _record["parsed_answer"] == 4
assert_close(_record["correctness"], 1.0, what="'4' 的 correctness")
assert_close(_record["format_pass"], 1.0, what="'4' 的 format_pass")
assert_close(_record["total_reward"], 1.1, what="'4' 的 total_reward")

_record = verify_integer_response("  The answer is 4.  ", 4)
assert _record["parsed_answer"] == 4 and _record["status"] == "ok"
assert_close([_record["correctness"], _record["format_pass"], _record["total_reward"]], [1.0, 0.0, 1.0],
             what="'The answer is 4.' 的三个分量")

_record = verify_integer_response("2 + 2 = 5", 4)
assert _record["parsed_answer"] == 5, "应取最后一个整数（5），而不是第一个（2）"
assert_close(_record["total_reward"], 0.0, what="'2 + 2 = 5' 的 total_reward")

_record = verify_integer_response("I do not know.", 4)
assert _record["status"] == "unjudgeable" and _record["parsed_answer"] is None
assert_close([_record["correctness"], _record["format_pass"], _record["total_reward"]], [0.0, 0.0, 0.0],
             what="不可判定回答的分量")

_record = verify_integer_response("\n-7\t", -7, correctness_weight=2.0, format_weight=0.5)
assert _record["parsed_answer"] == -7
assert_close(_record["total_reward"], 2.5, what="自定义权重下的 total_reward")

expect_value_error(lambda: verify_integer_response(4, 4), "response 不是字符串")
expect_value_error(lambda: verify_integer_response("4", "4"), "expected_answer 不是 int")
expect_value_error(lambda: verify_integer_response("1", True), "expected_answer 是 bool")
expect_value_error(lambda: verify_integer_response("4", 4, correctness_weight=-1.0), "权重为负")
expect_value_error(lambda: verify_integer_response("4", 4, format_weight=float("nan")), "权重不是有限数")
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb04_verifiable_rewards", "test_verify_integer_response_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ### 在固定候选组上运行验证器
#
# 第 6 课的实验用两道题、每题四个固定候选。固定候选把采样噪声排除在外，让我们只看“验证器 → 奖励”这一段。
# 下面逐条打印每个分量，而不是只打印总分。

# %%
GROUP_FIXTURES = [
    {"prompt": "Return only the integer result of 2 + 2.", "expected_answer": 4,
     "responses": ["4", "5", "The answer is 4.", "I do not know."]},
    {"prompt": "Return only the integer result of 3 * 3.", "expected_answer": 9,
     "responses": ["9", "6", "The answer is 9.", "10"]},
]


def print_records(rows):
    """Print verifier records as a fixed-width table, one component per column."""
    header = f"{'response':<22} {'status':<12} {'parsed':>6} {'correct':>7} {'format':>6} {'total':>6}"
    print(header)
    print("-" * len(header))
    for response, record in rows:
        parsed = "None" if record["parsed_answer"] is None else str(record["parsed_answer"])
        print(f"{response!r:<22} {record['status']:<12} {parsed:>6} {record['correctness']:>7.1f} "
              f"{record['format_pass']:>6.1f} {record['total_reward']:>6.2f}")


fixture_rows = []
for fixture in GROUP_FIXTURES:
    for response in fixture["responses"]:
        fixture_rows.append((response, verify_integer_response(response, fixture["expected_answer"])))
print_records(fixture_rows)
fixture_records = [record for _, record in fixture_rows]
print("正确率", sum(r["correctness"] for r in fixture_records) / len(fixture_records),
      "| 格式通过率", sum(r["format_pass"] for r in fixture_records) / len(fixture_records),
      "| 不可判定数", sum(r["status"] == "unjudgeable" for r in fixture_records))

# %% [markdown]
# 读表时注意三件事：
#
# - `"The answer is 4."` 答对了但没按要求“只输出整数”，所以 correctness 为 1、format_pass 为 0；
#   `"5"` 格式完美但答错了。只看总分你分不清这两种失败；分量分开记，才能知道模型学会的是任务还是格式。
# - `"I do not know."` 是**不可判定**：验证器没有崩溃，只是回答里没有可比较的整数。`integer-answer-v1` 对它给 0 分
#   （这是模型的问题，算作任务失败是合理的），但状态单独记为 `unjudgeable`，方便统计。
# - 这个验证器也有自己的盲区，下面这两条正确回答会被判错。把它们记在“失败样本”里，就是在为验证器的下一个版本积累证据。

# %%
print_records([(text, verify_integer_response(text, 4)) for text in ["4.0", "4 (because 2 + 2)"]])

# %% [markdown]
# ## 第 2 步　奖励分量、证据与验证状态
#
# 组内优势、概率比、裁剪比例和 KL 只能说明**优化过程**是否平稳，不能说明回答的真实质量在变好。
# RLVR 还需要两类额外证据：每个奖励分量都能由固定版本的验证过程复算出来；以及一套独立于训练奖励的检查，用来发现奖励投机。
# 下表把常见的奖励分量、它们怎样失真、以及必须一起记录的证据放在一起。
#
# | 奖励分量 | 通常由什么产生 | 被钻空子时的样子 | 要和它一起留下的证据 |
# | --- | --- | --- | --- |
# | 正确性 | 与参考答案比对、单元测试、环境的终止状态 | 模型找到验证器的漏洞，而不是解决问题 | 不参与训练的隐藏评测集、判错样本、验证器版本 |
# | 格式 | 标签、JSON 结构、工具调用的语法 | 格式全对、答案全错 | 格式通过率与**独立统计**的正确率，两者分开报告 |
# | 长度与风格 | 长度惩罚、去冗余规则、风格打分 | 推理被截短，或输出变成固定模板 | 长度分布，以及长度变化前后的任务质量 |
# | 安全与策略约束 | 分类器、规则、人工偏好 | 过度拒答，或只在某些人群/话题上变差 | 拒答率、帮助性，按子群拆开的结果 |
# | 稳定性约束 | 当前策略与参考策略的差距（KL、概率比） | 一步更新太猛，或者干脆不动 | KL、概率比的范围、裁剪比例，以及失败的运行 |
# | 验证状态 | 验证过程本身：通过、失败、超时、出错、不可判定 | 把系统故障（超时、沙箱崩溃）记成了模型答错 | 验证器版本、错误类型、重试次数与重试结果 |
#
# 最后一行最容易被忽略。对会**执行代码**的验证器（跑单元测试、跑环境），一次检查可能有四种结局：
#
# - `pass` / `fail`：代码跑完了，测试通过或没通过——这是对**任务**的判断；
# - `timeout`：在时限内没有跑完——可能是候选写了死循环（任务失败），也可能是机器太忙（系统问题），必须单独记录，按事先写好的策略处理；
# - `error`：验证器自己出了故障（解释器起不来、沙箱缺依赖）——这和候选代码写得好不好**无关**，给它 0 分等于冤枉模型，
#   训练会把这个噪声当成信号放大。合理的做法是记为“无法评分”（`None`），不参与组内比较。
#
# 下面是一个真的会执行候选代码的小验证器：每个候选代码在独立的子进程里运行，带超时。
# 第四个候选故意死循环；最后一次调用把解释器路径指向一个不存在的文件，模拟“验证器自身出错”。

# %% nbgrader={"locked": true, "grade_id": "demo_code_verifier"}
CODE_TASK_TESTS = "assert add(2, 3) == 5\nassert add(-4, 4) == 0\n"


def run_code_verifier(candidate_code, tests=CODE_TASK_TESTS, timeout_s=1.0, interpreter=sys.executable):
    """Execute candidate code + tests in a fresh interpreter; return a record whose status separates outcomes."""
    started = time.perf_counter()
    try:
        completed = subprocess.run([interpreter, "-I", "-c", candidate_code + "\n" + tests],
                                   capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        status, detail = "timeout", f"超过 {timeout_s} 秒"
    except OSError as error:  # the verifier itself could not run: not the candidate's fault
        status, detail = "error", f"{type(error).__name__}: {error.strerror}"
    else:
        status = "pass" if completed.returncode == 0 else "fail"
        detail = (completed.stderr.strip().splitlines() or [""])[-1]
    return {"verifier_id": "python-add-tests-v1", "status": status, "detail": detail,
            "seconds": round(time.perf_counter() - started, 2)}


CODE_CANDIDATES = {
    "正确实现": "def add(a, b):\n    return a + b",
    "答案错误": "def add(a, b):\n    return a - b",
    "运行时异常": "def add(a, b):\n    return a + undefined_name",
    "死循环": "def add(a, b):\n    while True:\n        pass",
}
code_records = {name: run_code_verifier(code) for name, code in CODE_CANDIDATES.items()}
code_records["验证器故障"] = run_code_verifier(CODE_CANDIDATES["正确实现"], interpreter="/nonexistent/python")
for name, record in code_records.items():
    print(f"{name:<8} status={record['status']:<8} {record['seconds']:>5.2f}s  {record['detail'][:60]}")

# %% [markdown]
# 注意“验证器故障”那一行：被检查的是**正确实现**，但因为验证器起不来，结局是 `error`。
# 如果把 `error` 和 `fail` 都映射成 0 分，这个正确回答就会得到负的组内优势，模型会被推离正确答案。
# 所以状态到奖励的映射要显式写出来，并把“无法评分”交给下一步的组合规则处理：

# %%
STATUS_TO_REWARD = {"pass": 1.0, "fail": 0.0, "timeout": None, "error": None}
code_rewards = {name: STATUS_TO_REWARD[record["status"]] for name, record in code_records.items()}
print(code_rewards)

# %% [markdown]
# 这里把 `timeout` 也记成 `None` 是一个**策略选择**：在共享的小机器上，超时更可能是系统问题。
# 如果你的沙箱资源固定、时限宽松，把超时当任务失败（0 分）同样说得通——关键是把选择写下来，并且保留原始状态，
# 以后可以按状态重新计算奖励，而不必重跑验证。

# %% [markdown]
# ## 第 3 步　动手制造两次奖励投机
#
# ### 3.1　格式通过，任务失败
#
# 格式奖励本意是鼓励“只输出整数”。它的权重如果和正确性差不多，格式就会和正确性抢信号。
# 下面用同一组候选，比较 `format_weight=0.1`（课程默认）和 `format_weight=1.0` 时的总分和组内排序。

# %%
def group_advantages(rewards, eps=1e-6):
    """Group-relative advantage of one group: lesson 1's compute_group_advantages (population std, eps floor)."""
    rewards = torch.as_tensor(rewards, dtype=torch.float64)  # [G]
    return compute_group_advantages(rewards, torch.zeros(len(rewards), dtype=torch.long), eps=eps)  # [G]


hack_group = ["5", "The answer is 4.", "4", "I do not know."]
for weight in (0.1, 1.0):
    totals = [verify_integer_response(text, 4, format_weight=weight)["total_reward"] for text in hack_group]
    advantages = group_advantages(totals)
    print(f"format_weight={weight}")
    for text, total, advantage in zip(hack_group, totals, advantages.tolist()):
        print(f"    {text!r:<20} total={total:.2f} advantage={advantage:+.3f}")

# %% [markdown]
# 当 `format_weight=1.0` 时，错误但格式整齐的 `"5"` 与正确但啰嗦的 `"The answer is 4."` 拿到**相同的总分和相同的优势**：
# 策略更新对“答对”和“格式好”一视同仁，模型完全可以靠只学格式拿到一半奖励。
# 默认的 0.1 让格式只在答案相同的回答之间起“打破平局”的作用。无论权重怎么选，
# 格式通过率和正确率都要分开报告——这正是第 2 步表格里“格式”一行要求的证据。
#
# ### 3.2　一个可以被钻空子的验证器，以及修复
#
# 一个看似合理的写法是“回答里**包含**正确答案就给分”。它对诚实的回答完全没问题，
# 但一个学会“把可能的数字都列出来”的模型，能在不会做题的情况下拿满分。

# %%
def contains_answer_verifier(response, expected_answer):
    """A gameable verifier: full reward whenever the expected answer appears anywhere in the text."""
    return 1.0 if str(expected_answer) in response else 0.0


gaming_responses = [
    "4",                                   # honest and correct
    "0 1 2 3 4 5 6 7 8 9",                 # enumerate every digit
    "It is 14.",                           # wrong answer that contains the digit 4
    "4? 5? Maybe 6.",                      # hedge over several candidates
]
print(f"{'response':<24} {'contains':>8} {'v1 correct':>10} {'v1 total':>8}")
for text in gaming_responses:
    record = verify_integer_response(text, 4)
    print(f"{text!r:<24} {contains_answer_verifier(text, 4):>8.1f} {record['correctness']:>10.1f} {record['total_reward']:>8.2f}")

# %% [markdown]
# “包含即得分”的验证器给三个没有作答能力的回答都打了满分。`integer-answer-v1` 的两条规则堵住了这些漏洞：
# 只比较**一个**解析出的整数（最后一个），并且整数按完整数字比较（`14` 不等于 `4`）；
# 格式分再额外奖励“只有一个整数”的回答。修复后枚举和对冲都拿 0 分。
#
# 修复不等于没有漏洞：模型仍可以把猜测放在最后（`"5? 6? 4"` 会被判对）。这类漏洞只能靠第 2 步里的
# 独立证据发现——不参与训练的评测、抽查判对样本、随训练步数追踪“回答里整数的个数”这种行为统计。

# %%
print_records([(text, verify_integer_response(text, 4)) for text in ["5? 6? 4"]])

# %% [markdown]
# ## 第 4 步　组合多个奖励函数（TRL 的规则）
#
# 实际训练常同时用几个奖励函数：正确性、格式、长度……每个函数对每个回答给一个分数，
# 也可以对**不适用**或**无法评分**的回答返回 `None`（例如代码验证器只对代码题打分，或者上面的 `error` 状态）。
# TRL 的 `GRPOTrainer` 这样处理：
#
# 1. 每个奖励函数返回一个长度为 `N`（回答数）的列表；把它们排成 `rewards_per_func`，形状 `[N, F]`，`None` 变成 `NaN`；
# 2. 每行按权重相加，**跳过 NaN 列**（`nansum`）：某个函数无法评分时，该回答的奖励只由其余函数决定；
# 3. 如果一行**全部**是 NaN，这个回答无法评分——`nansum` 会把它变成 0，这是错的（0 是一个真实的低分，会拉低组均值，
#    还会给它一个负优势）。所以这一行的结果保持 `NaN`，后面计算组内均值时排除，它的优势最后被置为 0。
#
# 权重可以为负（把一个函数当成惩罚项），但必须是有限数。
#
# ### TODO 2　`rewards_per_func_from_lists`
#
# 输入 `outputs`：长度为 `F` 的列表，第 `j` 个元素是第 `j` 个奖励函数返回的列表，长度都是 `N`；列表元素是实数或 `None`。
# 返回形状 `[N, F]`、dtype 为 `dtype` 的张量，`None` 的位置是 `NaN`。
# 输入契约（`ValueError`）：`outputs` 为空、不是列表/元组；某个函数的输出不是列表/元组、为空或长度与第一个不一致；
# 元素不是实数也不是 `None`（`bool` 也不接受）；元素是 `NaN` 或无穷大（无法评分必须明确写成 `None`）；`dtype` 不是浮点类型。

# %% nbgrader={"solution": true, "grade_id": "rewards_per_func_from_lists"}
def rewards_per_func_from_lists(outputs, dtype=torch.float32):
    """Stack F reward-function outputs (lists of N numbers or None) into a [N, F] tensor with NaN for None."""
    ### BEGIN SOLUTION
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype 必须是 torch 的浮点类型，收到 {dtype!r}")
    if not isinstance(outputs, (list, tuple)) or len(outputs) == 0:
        raise ValueError("outputs 必须是非空的列表：每个奖励函数一个输出列表")
    columns = []
    for j, column in enumerate(outputs):
        if not isinstance(column, (list, tuple)) or len(column) == 0:
            raise ValueError(f"第 {j} 个奖励函数的输出必须是非空列表")
        if len(column) != len(outputs[0]):
            raise ValueError(f"第 {j} 个奖励函数返回了 {len(column)} 个奖励，第 0 个返回了 {len(outputs[0])} 个，应一一对应")
        values = []
        for i, value in enumerate(column):
            if value is None:
                values.append(math.nan)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"奖励 [{i}, {j}] 必须是实数或 None，收到 {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"奖励 [{i}, {j}] 是 {value}：无法评分请返回 None，而不是 NaN/inf")
            values.append(float(value))
        columns.append(values)
    return torch.tensor(columns, dtype=dtype).T.contiguous()  # [N, F]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rewards_per_func_from_lists_visible", "points": 1}
"""检查：把每个奖励函数的输出列表排成 [N, F]，None 变 NaN，以及输入契约（可见测试）。"""
_table = rewards_per_func_from_lists([[1.0, None, 0.0], [0.5, 0.25, None]])
assert tuple(_table.shape) == (3, 2), f"形状应为 [N, F] = (3, 2)，实际 {tuple(_table.shape)}"
assert _table.dtype == torch.float32
assert_close(_table, [[1.0, 0.5], [float("nan"), 0.25], [0.0, float("nan")]], what="rewards_per_func")
assert rewards_per_func_from_lists([[1, 2]], dtype=torch.float64).dtype == torch.float64
expect_value_error(lambda: rewards_per_func_from_lists([]), "outputs 为空")
expect_value_error(lambda: rewards_per_func_from_lists([[1.0, 2.0], [1.0]]), "长度不一致")
expect_value_error(lambda: rewards_per_func_from_lists([[1.0, "x"]]), "元素不是实数")
expect_value_error(lambda: rewards_per_func_from_lists([[1.0, float("nan")]]), "元素是 NaN")
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb04_verifiable_rewards", "test_rewards_per_func_from_lists_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ### TODO 3　`combine_rewards`
#
# `combine_rewards(rewards_per_func, weights) -> Tensor`
#
# - `rewards_per_func`：浮点张量，形状 `[N, F]`，`NaN` 表示该函数无法给该回答评分；
# - `weights`：长度为 `F` 的列表/元组或一维张量，每个奖励函数一个有限权重（可以为负）；
# - 返回形状 `[N]`、dtype 与 `rewards_per_func` 相同的张量：每行是非 NaN 列的加权和；整行都是 NaN 时结果为 `NaN`。
# - 不能修改传入的 `rewards_per_func`。
#
# 输入契约（`ValueError`）：`rewards_per_func` 不是浮点张量或不是二维、`F == 0`；含有 ±inf；
# 权重个数与 `F` 不一致、不是一维、含有 NaN/inf。

# %% nbgrader={"solution": true, "grade_id": "combine_rewards"}
def combine_rewards(rewards_per_func, weights):
    """Weighted sum over reward functions that skips NaN columns; rows that are NaN everywhere stay NaN."""
    ### BEGIN SOLUTION
    if not isinstance(rewards_per_func, torch.Tensor) or not rewards_per_func.is_floating_point():
        raise ValueError("rewards_per_func 必须是浮点张量，形状 [N, F]")
    if rewards_per_func.dim() != 2 or rewards_per_func.shape[1] == 0:
        raise ValueError(f"rewards_per_func 必须是 [N, F] 且 F >= 1，收到形状 {tuple(rewards_per_func.shape)}")
    if torch.isinf(rewards_per_func).any():
        raise ValueError("rewards_per_func 不能含有 ±inf：无法评分用 NaN 表示")
    weights = torch.as_tensor(weights, dtype=rewards_per_func.dtype, device=rewards_per_func.device)  # [F]
    if weights.dim() != 1 or weights.shape[0] != rewards_per_func.shape[1]:
        raise ValueError(f"weights 必须是长度为 F={rewards_per_func.shape[1]} 的一维序列，收到形状 {tuple(weights.shape)}")
    if not torch.isfinite(weights).all():
        raise ValueError("weights 必须全是有限数")
    unscorable = torch.isnan(rewards_per_func).all(dim=1)  # [N]
    combined = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)  # [N]
    return combined.masked_fill(unscorable, math.nan)  # [N]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_combine_rewards_visible", "points": 3}
"""检查：加权和跳过 NaN 列、全 NaN 行保持 NaN、dtype 与输入契约（可见测试）。"""
_nan = float("nan")
_table = torch.tensor([[1.0, 1.0], [0.0, _nan], [_nan, 1.0], [_nan, _nan]])  # [N=4, F=2]
_combined = combine_rewards(_table, [1.0, 0.1])
assert tuple(_combined.shape) == (4,), f"结果形状应为 [N]，实际 {tuple(_combined.shape)}"
assert _combined.dtype == _table.dtype
assert_close(_combined, [1.1, 0.0, 0.1, _nan], what="加权奖励")
assert torch.isnan(_table[3]).all(), "不能修改传入的 rewards_per_func"
assert_close(combine_rewards(_table.double(), torch.tensor([2.0, -1.0])), [1.0, 0.0, -1.0, _nan], what="负权重")
expect_value_error(lambda: combine_rewards(_table, [1.0]), "权重个数与 F 不一致")
expect_value_error(lambda: combine_rewards(_table[0], [1.0, 1.0]), "rewards_per_func 不是二维")
expect_value_error(lambda: combine_rewards(torch.ones(2, 2, dtype=torch.int64), [1.0, 1.0]), "rewards_per_func 不是浮点")
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb04_verifiable_rewards", "test_combine_rewards_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ### 把三个奖励函数接在一起
#
# 现在把前面的验证器写成 TRL 风格的奖励函数（输入一批回答，返回一个列表），加上一个只对“要求简短回答”的题目适用的长度惩罚，
# 再算组合奖励和组内优势。第四个回答让所有函数都返回 `None`（模拟验证器整体故障），看它如何被排除在组均值之外。

# %%
group_prompt_expected = 4
group_responses = ["4", "The answer is 4.", "5", "4"]
verifier_outage = [False, False, False, True]  # the last response could not be verified at all


def correctness_reward(responses):
    return [None if outage else verify_integer_response(text, group_prompt_expected)["correctness"]
            for text, outage in zip(responses, verifier_outage)]


def format_reward(responses):
    return [None if outage else verify_integer_response(text, group_prompt_expected)["format_pass"]
            for text, outage in zip(responses, verifier_outage)]


def length_penalty(responses):
    return [None if outage else -max(0, len(text) - 8) / 10 for text, outage in zip(responses, verifier_outage)]


reward_table = rewards_per_func_from_lists(
    [correctness_reward(group_responses), format_reward(group_responses), length_penalty(group_responses)])  # [N, F]
rewards = combine_rewards(reward_table, [1.0, 0.1, 0.5])  # [N]
scorable = ~torch.isnan(rewards)  # [N]
advantages = torch.zeros_like(rewards)  # [N]
advantages[scorable] = group_advantages(rewards[scorable]).to(rewards.dtype)
print("rewards_per_func =\n", reward_table)
print("combined rewards =", rewards.tolist())
print("advantages       =", [round(value, 3) for value in advantages.tolist()])
naive = reward_table.nan_to_num(0.0) @ torch.tensor([1.0, 0.1, 0.5])  # [N]
print("若把 NaN 当 0：   ", naive.tolist(), "-> 优势", [round(v, 3) for v in group_advantages(naive).tolist()])

# %% [markdown]
# 对比最后两行：把无法评分当成 0 分，第四个回答（内容其实和第一个一样正确）拿到了组里最低的优势，
# 组均值也被拉低，其余回答的优势随之虚高。保持 NaN、只在可评分的回答之间比较，第四个回答的优势为 0——它既不被鼓励也不被惩罚。

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "explain_unscorable_policy", "points": 2}
# **思考题（人工评分）**：一个代码验证器在一次训练中有 5% 的调用返回 `error`（沙箱故障）。
# 如果把这些 `error` 一律记为 0 分，会对 GRPO 的更新造成什么影响？你会怎样记录和处理？
#
# ### BEGIN SOLUTION
# **参考答案与解析**
#
# - 记为 0 分等于把系统故障当成任务失败：被故障命中的回答（不论对错）在组内得到偏低甚至负的优势，
#   组均值也被拉低，使同组其他回答的优势虚高。这是与回答内容无关的噪声，却会被策略更新当成信号放大；
#   如果故障和某类回答相关（例如长回答更容易超时），它还会系统性地把模型推离这类回答。
# - 正确做法：保留原始状态（`pass/fail/timeout/error`）、验证器版本、错误类型与重试记录；
#   `error` 映射为 `None`（`NaN`），组合奖励时跳过，整行无法评分时保持 `NaN`，不参与组均值，优势置 0；
#   超时按事先写明的策略处理；同时监控故障率，故障率升高时暂停训练而不是继续优化噪声。
# - 解析要点回顾：正确性与格式分开记录（第 1 步、第 3.1 节）；“包含即得分”的验证器被枚举攻破，`integer-answer-v1`
#   用“最后一个整数 + 完整匹配”修复，但仍需独立评测发现残余漏洞（第 3.2 节）；组合规则与 TRL 的
#   `GRPOTrainer` 一致：`None → NaN`、`nansum`、全 NaN 行恢复为 NaN（第 4 步）。
# ### END SOLUTION

# %%
print(f"本笔记从第一个代码单元运行到这里用了 {time.perf_counter() - _lesson_started:.1f} 秒（本机此刻的负载下实测，不含内核启动）")

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 到这里本课就完成了。提交前请从头到尾重新运行一遍（Kernel → Restart & Run All），确认所有测试单元格都通过；
# 上面的思考题由老师人工评分。

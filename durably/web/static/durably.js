// The dashboard's only script. Ask before a form that gives up on work (data-confirm, on the
// form or on the button that sends it; {action} and {selected} are filled in). On the runs
// list: tick every run at once, and count the runs ticked for the bulk bar.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const button = event.submitter;
  const asked = (button && button.dataset.confirm) || (form.dataset && form.dataset.confirm);
  if (!asked) return;
  const action = form.querySelector("select[name=action]");
  const question = asked
    .replace("{action}", action ? action.value.charAt(0).toUpperCase() + action.value.slice(1) : "")
    .replace("{selected}", String(ticked().length));
  if (!window.confirm(question)) event.preventDefault();
});

function ticked() {
  return [...document.querySelectorAll("input[name=ids][form=bulk]")].filter((box) => box.checked);
}

function countTicked() {
  const count = document.querySelector("#bulk [data-selected]");
  if (!count) return;
  count.textContent = String(ticked().length);
  document.querySelector("#bulk button[value=selected]").disabled = ticked().length === 0;
}

document.addEventListener("change", (event) => {
  if (event.target.matches("input[data-select-all]")) {
    for (const box of document.querySelectorAll("input[name=ids][form=bulk]")) {
      box.checked = event.target.checked;
    }
  }
  countTicked();
});
countTicked();

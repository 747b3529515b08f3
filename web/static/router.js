// The page's router: go() moves to a route; the app says what showing a
// route means. Views import this module, not the app, so that no module
// imports the app back.

let show = () => {};

// onRoute sets what showing the current route does (the app's router).
export function onRoute(fn) {
  show = fn;
}

// go navigates to a route of the page, showing it again if it is the
// current one.
export function go(hash) {
  if (location.hash === hash) show();
  else location.hash = hash;
}
